// Link probing: the time and bandwidth of every link of the rank ring (r with r + 1), each measured
// alone, and the judgement that pins slow links on hosts. Used by the self-check (docs/robustness.md R06) with a large
// message and, during training, by the link monitor (health/link_monitor.h) with a small one.
//
// Judging: a pair is slow when its bandwidth is under 1/ratio of the fastest pair of its kind
// (inter-host pairs are compared with inter-host pairs, pairs inside a host with those) and its
// transfer took at least min_extra_s longer than that fastest pair's. A host is blamed when every
// inter-host pair it takes part in is slow (a slow host link slows all of them; with two hosts both
// are blamed, since one link cannot tell its ends apart); a slow pair no blamed host explains
// blames both its hosts, and a slow pair inside a host blames that host.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/comm.h"

namespace megatrain {

struct LinkSample {
  int a = 0, b = 0;             // the pair's ranks (b = a + 1 mod world size)
  bool inter_host = false;
  double seconds = 0.0;         // the transfer of the probe message
  double bandwidth = 0.0;       // bytes per second
  double latency = 0.0;         // one way, from ping-pongs of one byte
  bool slow = false;            // set by judge_links
};

// Collective over `world` (every rank the same samples). `hosts`: each rank's host name. The
// message goes `transfers` times and the fastest counts: a transfer that lost its core to another
// process for a moment is noise, a slow link is slow every time.
std::vector<LinkSample> probe_ring_links(const Comm& world, const std::vector<std::string>& hosts, int64_t bytes,
                                         int pings, int transfers = 1);

struct LinkVerdict {
  std::vector<std::string> hosts;  // blamed, sorted
  std::vector<int> ranks;          // the ranks on blamed hosts that belong to a slow pair, sorted
  bool ok() const { return hosts.empty(); }
};

// Marks the slow samples and blames hosts (rules above). Pure: unit-testable.
LinkVerdict judge_links(std::vector<LinkSample>& samples, const std::vector<std::string>& hosts, double ratio,
                        double min_extra_s);

// Each pair of `into` takes `again`'s sample where that transfer was faster (the same ring, measured
// again later): on a busy machine a pair can lose its cores through all of one probe's transfers,
// while a slow link is slow in every probe.
void keep_faster(std::vector<LinkSample>& into, const std::vector<LinkSample>& again);

// "0-1: 1888 MB/s 239 us; 1-2 (inter-host): 1 MB/s 187 us SLOW; …"
std::string describe_links(const std::vector<LinkSample>& samples);

}  // namespace megatrain
