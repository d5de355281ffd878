#include "health/link_probe.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "parallel/comm_gather.h"

namespace megatrain {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Pair k is (k, k + 1 mod p). Pairs of one phase share no rank, so each link is measured alone:
// even k, then odd k, then — in an odd ring — the pair that closes it.
int phase_of(int k, int p) { return p % 2 == 1 && k == p - 1 ? 2 : k % 2; }

constexpr int kPing = 11, kData = 12, kAck = 13;

}  // namespace

std::vector<LinkSample> probe_ring_links(const Comm& world, const std::vector<std::string>& hosts, int64_t bytes,
                                         int pings, int transfers) {
  MT_CHECK(transfers >= 1, "probe_ring_links: {} transfers", transfers);
  const int p = world.size(), r = world.rank();
  if (p == 1) return {};
  const int pairs = p == 2 ? 1 : p;  // two ranks have one link
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  std::vector<uint8_t> buf(static_cast<size_t>(bytes), 1);
  double seconds = 0.0, latency = 0.0;
  for (int phase = 0; phase < 3; ++phase) {
    const bool lead = r < pairs && phase_of(r, p) == phase;
    const bool follow = prev < pairs && phase_of(prev, p) == phase;
    world.barrier();
    if (lead) {
      uint8_t ping = 1;
      const auto l0 = Clock::now();
      for (int k = 0; k < pings; ++k) {
        world.send(&ping, 1, next, kPing).wait();
        world.recv(&ping, 1, next, kPing).wait();
      }
      latency = pings > 0 ? since(l0) / pings / 2 : 0.0;
      for (int t = 0; t < transfers; ++t) {
        const auto b0 = Clock::now();
        world.send(buf.data(), bytes, next, kData).wait();
        world.recv(&ping, 1, next, kAck).wait();
        seconds = t == 0 ? since(b0) : std::min(seconds, since(b0));
      }
    }
    if (follow) {
      uint8_t ping = 0;
      for (int k = 0; k < pings; ++k) {
        world.recv(&ping, 1, prev, kPing).wait();
        world.send(&ping, 1, prev, kPing).wait();
      }
      for (int t = 0; t < transfers; ++t) {
        world.recv(buf.data(), bytes, prev, kData).wait();
        world.send(&ping, 1, prev, kAck).wait();
      }
    }
  }
  const auto secs = all_gather_value(world, seconds), lat = all_gather_value(world, latency);
  std::vector<LinkSample> out;
  for (int a = 0; a < pairs; ++a) {
    const auto i = static_cast<size_t>(a);
    const int b = (a + 1) % p;
    out.push_back({a, b, hosts[i] != hosts[static_cast<size_t>(b)], secs[i],
                   static_cast<double>(bytes) / std::max(secs[i], 1e-9), lat[i], false});
  }
  return out;
}

LinkVerdict judge_links(std::vector<LinkSample>& samples, const std::vector<std::string>& hosts, double ratio,
                        double min_extra_s) {
  // The fastest pair of each kind is the reference.
  std::map<bool, const LinkSample*> best;
  for (const LinkSample& s : samples)
    if (!best.count(s.inter_host) || s.bandwidth > best[s.inter_host]->bandwidth) best[s.inter_host] = &s;
  for (LinkSample& s : samples) {
    const LinkSample& ref = *best[s.inter_host];
    s.slow = s.bandwidth * ratio < ref.bandwidth && s.seconds - ref.seconds >= min_extra_s;
  }
  const auto host_of = [&](int rank) { return hosts[static_cast<size_t>(rank)]; };
  std::map<std::string, std::pair<int, int>> inter;  // host → (slow inter-host pairs, inter-host pairs)
  for (const LinkSample& s : samples)
    if (s.inter_host)
      for (const std::string& h : {host_of(s.a), host_of(s.b)}) inter[h].first += s.slow, inter[h].second += 1;
  std::set<std::string> blamed;
  for (const auto& [h, counts] : inter)
    if (counts.first > 0 && counts.first == counts.second) blamed.insert(h);
  for (const LinkSample& s : samples) {
    if (!s.slow) continue;
    if (!s.inter_host) blamed.insert(host_of(s.a));
    else if (!blamed.count(host_of(s.a)) && !blamed.count(host_of(s.b))) blamed.insert({host_of(s.a), host_of(s.b)});
  }
  std::set<int> ranks;
  for (const LinkSample& s : samples)
    if (s.slow)
      for (int r : {s.a, s.b})
        if (blamed.count(host_of(r))) ranks.insert(r);
  return {{blamed.begin(), blamed.end()}, {ranks.begin(), ranks.end()}};
}

void keep_faster(std::vector<LinkSample>& into, const std::vector<LinkSample>& again) {
  MT_CHECK(into.size() == again.size(), "keep_faster: {} pairs against {}", into.size(), again.size());
  for (size_t i = 0; i < into.size(); ++i)
    if (again[i].seconds < into[i].seconds) into[i] = again[i];
}

std::string describe_links(const std::vector<LinkSample>& samples) {
  std::vector<std::string> text;
  for (const LinkSample& s : samples)
    text.push_back(fmt::format("{}-{}{}: {:.0f} MB/s {:.0f} us{}", s.a, s.b, s.inter_host ? " (inter-host)" : "",
                               s.bandwidth / 1e6, s.latency * 1e6, s.slow ? " SLOW" : ""));
  return fmt::format("{}", fmt::join(text, "; "));
}

}  // namespace megatrain
