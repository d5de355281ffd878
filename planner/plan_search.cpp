#include "planner/plan_search.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "kernels/check.h"

namespace megatrain {
namespace {

constexpr std::array<Recompute, 3> kRecomputes = {Recompute::none, Recompute::selective, Recompute::full};

const char* recompute_name(Recompute r) {
  return r == Recompute::none ? "none" : r == Recompute::selective ? "selective" : "full";
}

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Context parallelism over the ranks left by tp and pp: cp = 1, and each power of two above it with
// both algorithms (the config rules refuse what the sequence or the heads do not allow). CPU
// profiles only: context parallelism has not run on a GPU yet, so GPU plans keep their picks.
std::vector<std::pair<int, CpComm>> context_options(int ranks, const DeviceProfile& device) {
  std::vector<std::pair<int, CpComm>> out{{1, CpComm::ring}};
  if (device.compute() != Device::cpu) return out;
  for (int cp = 2; cp <= ranks; cp *= 2)
    if (ranks % cp == 0)
      for (CpComm a : {CpComm::ring, CpComm::all_to_all}) out.emplace_back(cp, a);
  return out;
}

}  // namespace

std::string layout_name(const Config& c) {
  const ParallelConfig& p = c.parallel;
  const std::string cp =
      p.cp > 1 ? fmt::format("cp {} {} ", p.cp, p.cp_comm == CpComm::ring ? "ring" : "all_to_all") : std::string();
  return fmt::format("tp {} pp {} {}dp {} ep {} zero {} rc {} mb {}", p.tp, p.pp, cp, p.dp, p.ep, p.zero_stage,
                     recompute_name(c.train.recompute), c.train.micro_batch_size);
}

PlanSearch search_layouts(const Config& base, int devices, const DeviceProfile& device) {
  MT_INPUT_CHECK(devices >= 1, "--gpus {}: the number of devices must be at least 1", devices);
  MT_INPUT_CHECK(base.train.global_batch_size > 0,
                 "{}: train.global_batch_size is 0 (micro_batch_size · dp); the planner keeps the global batch "
                 "fixed while it varies dp and the micro-batch: set it in the config or with --set",
                 base.source);
  const double capacity = device.memory_gib * double(1 << 30);
  PlanSearch out;
  for (int tp = 1; tp <= std::min(devices, device.devices_per_node); tp *= 2) {
    if (devices % tp != 0) continue;
    for (int pp : divisors(devices / tp))
      for (const auto& [cp, cp_comm] : context_options(devices / (tp * pp), device)) {
        const int dp = devices / (tp * pp * cp);
        for (int ep : base.model.moe.enabled() ? divisors(dp) : std::vector<int>{1})
          for (int zero = 0; zero <= 3; ++zero)
            for (Recompute rc : kRecomputes)
              for (int mb = 1; mb <= base.train.global_batch_size / dp; mb *= 2) {
                ++out.considered;
                Config c = base;
                ParallelConfig& p = c.parallel;
                p.tp = tp, p.pp = pp, p.cp = cp, p.cp_comm = cp_comm, p.dp = dp, p.ep = ep, p.zero_stage = zero;
                p.sequence_parallel = tp > 1;
                p.pipeline_layers.clear();
                if (pp == 1) p.virtual_stages = 1, p.pipeline_schedule = "1f1b";
                c.train.recompute = rc;
                c.train.recompute_layers = 0;
                c.train.micro_batch_size = mb;
                c.train.device = device.compute();
                try {
                  resolve_config(c, devices);
                } catch (const InputError&) {
                  ++out.invalid;
                  continue;
                }
                Plan plan{c, plan_memory(c), {}};
                if (static_cast<double>(plan.memory.total()) > capacity) {
                  ++out.over_memory;
                  continue;
                }
                plan.cost = predict_step(c, device);
                out.ranked.push_back(std::move(plan));
              }
      }
  }
  std::ranges::stable_sort(out.ranked, [](const Plan& a, const Plan& b) {
    return a.cost.step != b.cost.step ? a.cost.step < b.cost.step : a.memory.total() < b.memory.total();
  });
  return out;
}

std::string explain(const PlanSearch& s, const DeviceProfile& device) {
  if (s.ranked.empty())
    return fmt::format("no layout fits: {} considered, {} refused by the config rules, {} over {:.0f} GiB per device; "
                       "plan for more devices (--gpus) or a smaller model\n",
                       s.considered, s.invalid, s.over_memory, device.memory_gib);
  const Plan& best = s.ranked[0];
  const StepCost& t = best.cost;
  const auto pct = [&](double x) { return 100.0 * x / t.step; };
  const auto gib = [](int64_t b) { return static_cast<double>(b) / double(1 << 30); };
  const MemoryMetrics& m = best.memory.bytes;
  std::string out = fmt::format(
      "best: {} — {:.0f} tokens/s, {:.1f} ms per step, MFU {:.1f}%\n"
      "  time: compute {:.0f}% | pipeline bubble {:.0f}% | tp comm {:.0f}% | cp comm {:.0f}% | pp p2p {:.0f}% | "
      "ep all-to-all {:.0f}% | dp comm (exposed) {:.0f}% | optimizer {:.0f}%{}\n"
      "  memory (pipeline rank {}, the largest): {:.2f} GiB = params {:.2f} + master {:.2f} + grads {:.2f} + "
      "optimizer {:.2f} + activations {:.2f} + comm buffers {:.2f}\n",
      layout_name(best.config), t.tokens_per_s, t.step * 1e3, t.mfu * 100, pct(t.compute), pct(t.bubble), pct(t.tp),
      pct(t.cp), pct(t.pp), pct(t.ep), pct(t.dp), pct(t.optimizer),
      t.cores > 0 ? fmt::format(" | waiting for cores {:.0f}%", pct(t.cores)) : std::string(), best.memory.pp_rank, gib(best.memory.total()),
      gib(m.params), gib(m.master_params), gib(m.grads), gib(m.optimizer), gib(m.activations), gib(m.comm_buffers));
  if (s.ranked.size() < 2) return out;
  const Plan& next = s.ranked[1];
  const StepCost& u = next.cost;
  // The runner-up's largest excess over the best, by kind of time.
  const std::array<std::pair<const char*, double>, 9> diff = {{{"compute (recompute, a smaller micro-batch)", u.compute - t.compute},
                                                              {"context-parallel attention messages", u.cp - t.cp},
                                                              {"pipeline bubble", u.bubble - t.bubble},
                                                              {"tensor-parallel communication", u.tp - t.tp},
                                                              {"pipeline transfers", u.pp - t.pp},
                                                              {"expert all-to-all", u.ep - t.ep},
                                                              {"data-parallel communication", u.dp - t.dp},
                                                              {"optimizer", u.optimizer - t.optimizer},
                                                              {"ranks waiting for the node's cores", u.cores - t.cores}}};
  const auto worst = std::ranges::max_element(diff, {}, [](const auto& d) { return d.second; });
  out += fmt::format("  runner-up: {} — {:.1f}% slower, mostly {} (+{:.2f} ms); it holds {:.2f} GiB\n",
                     layout_name(next.config), 100.0 * (u.step / t.step - 1.0), worst->first, worst->second * 1e3,
                     gib(next.memory.total()));
  return out;
}

}  // namespace megatrain
