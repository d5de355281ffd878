#include "parallel/pipeline_links.h"

#include <fmt/format.h>

#include <algorithm>

namespace megatrain {

PipelineLinks::PipelineLinks(const Comm& pp, bool wraps) {
  const int p = pp.size(), s = pp.rank();
  MT_CHECK(p >= 2, "pipeline links: a pipeline group of {} stages (at least 2 have links)", p);
  const int links = wraps ? p : p - 1;                  // link i joins stages i and (i + 1) mod p
  const int rounds = std::min(links, 2) + (wraps && p % 2 == 1 ? 1 : 0);  // the rounds that hold a link
  const auto round_of = [&](int i) { return wraps && p % 2 == 1 && i == p - 1 ? 2 : i % 2; };
  for (int d = 0; d < 2; ++d)
    for (int r = 0; r < rounds; ++r) {
      // This rank's link of the round: the one to its next stage (i = s) or to its previous (i = s − 1).
      int link = -1;
      for (int i : {s, (s + p - 1) % p})
        if (i < links && round_of(i) == r) link = i;
      const int lower = link, upper = (link + 1) % p;  // forward: lower → upper; backward: upper → lower
      const int sender = d == 0 ? lower : upper;
      const std::string name = fmt::format("pp.{}.{}->{}", d == 0 ? "fwd" : "bwd", sender, d == 0 ? upper : lower);
      // Ranks without a link this round: a communicator of their own (colors p + rank), dropped.
      const Comm c = pp.split(link >= 0 ? link : p + s, link >= 0 && s == sender ? 0 : 1, link >= 0 ? name : "pp.none");
      if (link < 0) continue;
      (s == sender ? out_ : in_)[d].emplace(c);
    }
}

Work PipelineLinks::send(PipeDir dir, const float* data, int64_t n) const {
  const std::optional<Comm>& c = out_[static_cast<int>(dir)];
  MT_CHECK(c.has_value(), "pipeline links: a {} send from the stage that has no next one",
           dir == PipeDir::forward ? "forward" : "backward");
  return c->send(data, n, 1, 0);
}

Work PipelineLinks::recv(PipeDir dir, float* data, int64_t n) const {
  const std::optional<Comm>& c = in_[static_cast<int>(dir)];
  MT_CHECK(c.has_value(), "pipeline links: a {} receive on the stage that has no previous one",
           dir == PipeDir::forward ? "forward" : "backward");
  return c->recv(data, n, 0, 0);
}

}  // namespace megatrain
