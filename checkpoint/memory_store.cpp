#include "checkpoint/memory_store.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "checkpoint/checkpoint_dir.h"
#include "kernels/check.h"
#include "kernels/fnv1a.h"

namespace megatrain {
namespace fs = std::filesystem;
namespace {

// FNV-1a of the layout JSON: a short folder name per layout.
std::string layout_key(const std::string& layout_json) { return fmt::format("layout_{:016x}", fnv1a(layout_json)); }

std::optional<int> rank_of(const std::string& name) {
  constexpr std::string_view prefix = "rank_", suffix = ".snap";
  if (!name.starts_with(prefix) || !name.ends_with(suffix)) return std::nullopt;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return std::nullopt;
  return std::stoi(digits);
}

}  // namespace

MemoryStore::MemoryStore(fs::path root, const std::string& node, const std::string& layout_json)
    : MemoryStore(std::move(root) / node / layout_key(layout_json), layout_json) {}

MemoryStore::MemoryStore(fs::path dir, std::string layout_json)
    : dir_(std::move(dir)), layout_json_(std::move(layout_json)) {}

std::vector<MemoryStore> MemoryStore::host_layouts() const {
  std::vector<MemoryStore> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_.parent_path(), ec)) {
    std::ifstream in(e.path() / "LAYOUT");
    std::string json;
    if (e.is_directory(ec) && std::getline(in, json) && !json.empty()) out.push_back(MemoryStore(e.path(), json));
  }
  std::sort(out.begin(), out.end(), [](const MemoryStore& a, const MemoryStore& b) { return a.dir_ < b.dir_; });
  return out;
}

fs::path MemoryStore::step_dir(int64_t step) const { return dir_ / checkpoint_step_name(step); }

fs::path MemoryStore::spare(int rank) const { return dir_ / "spare" / fmt::format("rank_{}.snap", rank); }

MemoryStore::Writing MemoryStore::write(int64_t step, int rank, size_t size) const {
  const fs::path d = step_dir(step), path = d / fmt::format("rank_{}.snap", rank), tmp = path.string() + ".tmp";
  std::error_code ec;
  fs::create_directories(d, ec);
  if (!fs::exists(dir_ / "LAYOUT")) {
    const fs::path layout = dir_ / "LAYOUT", layout_tmp = fmt::format("{}.{}.tmp", layout.string(), rank);
    { std::ofstream(layout_tmp) << layout_json_ << "\n"; }
    fs::rename(layout_tmp, layout, ec);
  }
  // The spare (if another rank of the host has not just taken it: rename is atomic) is overwritten
  // in place, cut or grown to length.
  fs::rename(spare(rank), tmp, ec);
  return Writing(MappedFile(tmp, size), tmp, path);
}

void MemoryStore::Writing::finish() {
  file_.unmap();
  std::error_code ec;
  fs::rename(tmp_, path_, ec);
  if (ec) throw CheckpointError(fmt::format("memory snapshot: cannot rename {}: {}", tmp_.string(), ec.message()));
}

void MemoryStore::put(int64_t step, int rank, std::string_view bytes) const {
  Writing w = write(step, rank, bytes.size());
  if (!bytes.empty()) std::memcpy(w.data(), bytes.data(), bytes.size());
  w.finish();
}

void MemoryStore::commit(int64_t step) const {
  const fs::path marker = step_dir(step) / "COMMITTED", tmp = marker.string() + ".tmp";
  { std::ofstream(tmp) << step << "\n"; }
  std::error_code ec;
  fs::rename(tmp, marker, ec);  // every rank of a host commits the same step: the last rename wins
  if (ec && !fs::exists(marker))
    throw CheckpointError(fmt::format("memory snapshot: cannot commit {}: {}", marker.string(), ec.message()));
}

void MemoryStore::prune(int keep) const {
  std::error_code ec;
  const std::vector<StoredStep> done = committed();
  for (size_t i = static_cast<size_t>(keep); i < done.size(); ++i) {
    fs::create_directories(spare(0).parent_path(), ec);
    for (const int r : done[i].ranks) fs::rename(step_dir(done[i].step) / spare(r).filename(), spare(r), ec);
    fs::remove_all(step_dir(done[i].step), ec);
  }
  if (done.empty()) return;
  for (const int64_t s : committed_steps(dir_))  // every step_N folder, committed or not
    if (s < done.front().step && !fs::exists(step_dir(s) / "COMMITTED")) fs::remove_all(step_dir(s), ec);
  for (const MemoryStore& other : host_layouts())
    if (other.dir_ != dir_) fs::remove_all(other.dir_, ec);
}

void MemoryStore::clear() const {
  std::error_code ec;
  fs::remove_all(dir_.parent_path(), ec);
  fs::remove(dir_.parent_path().parent_path(), ec);  // only when empty: the last host sharing it
}

int64_t MemoryStore::forget(const fs::path& root, const std::string& node) {
  const fs::path host = root / node;
  std::error_code ec;
  if (!fs::is_directory(host, ec)) {
    fs::remove(root, ec);
    return 0;
  }
  int64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(host)) {
    if (!e.is_directory() || !e.path().filename().string().starts_with("layout_") || !fs::exists(e.path() / "LAYOUT"))
      throw CheckpointError(fmt::format("{}: not a folder of memory snapshots (layout_*/LAYOUT); {} is not one of "
                                        "its layouts: removed nothing", host.string(), e.path().string()));
    bytes += MemoryStore(e.path(), "").bytes();
  }
  fs::remove_all(host);
  fs::remove(root, ec);
  return bytes;
}

std::vector<StoredStep> MemoryStore::committed() const {
  std::vector<StoredStep> out;
  for (const int64_t s : committed_steps(dir_)) {
    if (!fs::exists(step_dir(s) / "COMMITTED")) continue;
    StoredStep st{s, {}};
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(step_dir(s), ec))
      if (const auto r = rank_of(e.path().filename().string())) st.ranks.push_back(*r);
    std::sort(st.ranks.begin(), st.ranks.end());
    out.push_back(std::move(st));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string MemoryStore::get(int64_t step, int rank) const {
  const fs::path path = step_dir(step) / fmt::format("rank_{}.snap", rank);
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) throw CheckpointError(fmt::format("memory snapshot: {} is missing", path.string()));
  // One read into a string of the file's size: through a stringstream (its buffer grown by doubling,
  // then copied out) a 6 MiB snapshot took 25 times as long, most of a recovery's state load.
  std::string bytes(size, '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (!in || in.gcount() != static_cast<std::streamsize>(size))
    throw CheckpointError(fmt::format("memory snapshot: cannot read {} ({} bytes)", path.string(), size));
  return bytes;
}

int64_t MemoryStore::bytes() const {
  int64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir_, ec))
    if (e.is_regular_file(ec)) n += static_cast<int64_t>(e.file_size(ec));
  return n;
}

std::string stored_steps_text(const std::vector<StoredStep>& steps) {
  std::string out;
  for (const StoredStep& s : steps)
    out += fmt::format("{}{}:{}", out.empty() ? "" : ";", s.step, fmt::join(s.ranks, ","));
  return out;
}

std::vector<StoredStep> parse_stored_steps(const std::string& text) {
  std::vector<StoredStep> out;
  std::stringstream all(text);
  for (std::string item; std::getline(all, item, ';');) {
    const size_t colon = item.find(':');
    MT_CHECK(colon != std::string::npos, "memory snapshot inventory \"{}\" is malformed", text);
    StoredStep s{std::stoll(item.substr(0, colon)), {}};
    std::stringstream ranks(item.substr(colon + 1));
    for (std::string r; std::getline(ranks, r, ',');) s.ranks.push_back(std::stoi(r));
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace megatrain
