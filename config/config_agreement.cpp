#include "config/config_agreement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zlib.h>

#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "parallel/comm_gather.h"

namespace megatrain {
namespace {

// The resolved config without its first line (the comment naming the file, which may be spelled
// differently on different ranks).
std::string comparable(const Config& cfg) {
  const std::string text = config_to_toml(cfg);
  return text.substr(text.find('\n') + 1);
}

// "model.d_model = 128 where rank R has model.d_model = 64": the first line of `mine` that differs
// from `theirs`, with its section.
std::string first_difference(const std::string& mine, const std::string& theirs, int their_rank) {
  std::istringstream a(mine), b(theirs);
  std::string la, lb, section;
  while (true) {
    const bool more_a = static_cast<bool>(std::getline(a, la)), more_b = static_cast<bool>(std::getline(b, lb));
    if (!more_a && !more_b) return "";
    if (la.starts_with('[')) section = la.substr(1, la.find(']') - 1) + ".";
    if (la != lb)
      return fmt::format("{}{} where rank {} has {}{}", section, more_a ? la : "(nothing)", their_rank, section,
                         more_b ? lb : "(nothing)");
  }
}

}  // namespace

void agree_on_config(const Config& cfg, const Comm& world) {
  const int p = world.size();
  const std::string text = comparable(cfg);
  const int64_t mine = static_cast<int64_t>(crc32(0L, reinterpret_cast<const Bytef*>(text.data()),
                                                   static_cast<uInt>(text.size())));
  const std::vector<int64_t> all = all_gather_value(world, mine);
  std::map<int64_t, int> votes;
  for (int64_t h : all) ++votes[h];
  if (votes.size() == 1) return;
  // The majority's config is the reference (ties: rank 0's); its lowest rank sends its text.
  int64_t ref = all[0];
  for (const auto& [h, n] : votes)
    if (n > votes[ref]) ref = h;
  int ref_rank = 0;
  while (all[static_cast<size_t>(ref_rank)] != ref) ++ref_rank;
  std::vector<int> odd;
  for (int r = 0; r < p; ++r)
    if (all[static_cast<size_t>(r)] != ref) odd.push_back(r);
  int64_t n = world.rank() == ref_rank ? static_cast<int64_t>(text.size()) : 0;
  world.broadcast(&n, 1, ref_rank).wait();
  std::string theirs = world.rank() == ref_rank ? text : std::string(static_cast<size_t>(n), '\0');
  world.broadcast(reinterpret_cast<uint8_t*>(theirs.data()), n, ref_rank).wait();
  // Every rank learns every odd rank's first difference, so whichever rank's message is printed
  // before the job is aborted says it all.
  const std::vector<std::string> lines =
      all_gather_text(world, mine == ref ? "" : first_difference(text, theirs, ref_rank));
  std::vector<std::string> where;
  for (int r : odd)
    where.push_back(fmt::format("rank {}: {}", r, lines[static_cast<size_t>(r)]));
  throw InputError(fmt::format("{}: CONFIG_MISMATCH rank(s) [{}]: the resolved config differs from rank {}'s ({}); give "
                               "every rank the same config file, --set flags and megatrain binary",
                               cfg.source, fmt::join(odd, ", "), ref_rank, fmt::join(where, "; ")));
}

}  // namespace megatrain
