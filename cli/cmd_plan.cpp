// `megatrain plan --config X --gpus N --gpu h100|a100|cpu [--network nvlink=450,ib=50]
// [--gpus-per-node 8] [--profile FILE]`: searches the layouts of X's model on N devices
// (planner/plan_search.h), prints the fastest that fit with their predicted memory per rank and
// step time, and explains the best. `--given` predicts X's own layout only (`--json`: as one JSON
// object, for scripts). `--measure --profile-out FILE`, under mpirun with the ranks a run would use,
// measures this machine's CPU profile (planner/plan_profile.h) for `--gpu cpu --profile FILE`.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "kernels/check.h"
#include "planner/plan_search.h"

namespace megatrain {
namespace {

struct PlanOptions {
  std::string path, gpu = "h100", network, profile, profile_out;
  std::vector<std::string> overrides;
  int gpus = 0, gpus_per_node = 0, top = 10;
  bool measure = false, given = false, json = false;
};

DeviceProfile device_of(const PlanOptions& o) {
  DeviceProfile d;
  if (o.gpu == "cpu") {
    MT_INPUT_CHECK(!o.profile.empty(),
                   "--gpu cpu needs --profile FILE: measure one with `mpirun -np N megatrain plan --measure --config "
                   "{} --profile-out FILE`",
                   o.path);
    d = load_profile(o.profile);
  } else {
    MT_INPUT_CHECK(o.profile.empty(), "--profile is the measured CPU profile: use it with --gpu cpu, not --gpu {}",
                   o.gpu);
    d = gpu_profile(o.gpu);
  }
  if (!o.network.empty()) apply_network(d, o.network);
  if (o.gpus_per_node > 0) d.devices_per_node = o.gpus_per_node;
  return d;
}

nlohmann::json plan_json(const Plan& p) {
  const MemoryMetrics& m = p.memory.bytes;
  const StepCost& t = p.cost;
  return {{"layout", layout_name(p.config)},
          {"pp_rank", p.memory.pp_rank},
          {"memory_bytes",
           {{"params", m.params}, {"master_params", m.master_params}, {"grads", m.grads}, {"optimizer", m.optimizer},
            {"activations", m.activations}, {"comm_buffers", m.comm_buffers}, {"total", p.memory.total()}}},
          {"step_ms", t.step * 1e3},
          {"tokens_per_s", t.tokens_per_s},
          {"ms", {{"compute", t.compute * 1e3}, {"bubble", t.bubble * 1e3}, {"tp", t.tp * 1e3}, {"pp", t.pp * 1e3},
                  {"ep", t.ep * 1e3}, {"dp", t.dp * 1e3}, {"optimizer", t.optimizer * 1e3}, {"cores", t.cores * 1e3}}}};
}

void print_table(const std::vector<Plan>& plans, size_t top) {
  fmt::print("{:>3}  {:<48} {:>12} {:>10} {:>6} {:>10}  {}\n", "#", "layout", "tokens/s", "step ms", "MFU",
             "GiB/rank", "compute/bubble/tp/pp/ep/dp ms");
  for (size_t i = 0; i < std::min(top, plans.size()); ++i) {
    const Plan& p = plans[i];
    const StepCost& t = p.cost;
    fmt::print("{:>3}  {:<48} {:>12.0f} {:>10.1f} {:>5.1f}% {:>10.2f}  {:.0f}/{:.0f}/{:.0f}/{:.0f}/{:.0f}/{:.0f}\n", i + 1,
               layout_name(p.config), t.tokens_per_s, t.step * 1e3, t.mfu * 100,
               static_cast<double>(p.memory.total()) / double(1 << 30), t.compute * 1e3, t.bubble * 1e3, t.tp * 1e3,
               t.pp * 1e3, t.ep * 1e3, t.dp * 1e3);
  }
}

int run_plan(const PlanOptions& o) {
  Config cfg = load_config(o.path, o.overrides);
  if (o.measure) {
    MT_INPUT_CHECK(!o.profile_out.empty(), "--measure writes the profile to --profile-out FILE: name the file");
    const Comm world = Comm::world();
    const DeviceProfile d = measure_cpu_profile(cfg, world);
    if (world.rank() == 0) {
      std::ofstream(o.profile_out) << profile_to_toml(d);
      fmt::print("{}", profile_to_toml(d));
    }
    return 0;
  }
  MT_INPUT_CHECK(o.gpus >= 1, "--gpus N: the number of devices to plan for (at least 1)");
  const DeviceProfile device = device_of(o);
  if (o.given) {
    cfg.train.device = device.compute();
    resolve_config(cfg, o.gpus);
    const Plan p{cfg, plan_memory(cfg), predict_step(cfg, device)};
    if (o.json) {
      fmt::print("{}\n", plan_json(p).dump());
    } else {
      print_table({p}, 1);
    }
    return 0;
  }
  const PlanSearch s = search_layouts(cfg, o.gpus, device);
  fmt::print("megatrain plan: {} on {} × {} ({} per node): {} layouts, {} refused by the config rules, {} over "
             "{:.0f} GiB, {} fit\n",
             cfg.source, o.gpus, device.name, device.devices_per_node, s.considered, s.invalid, s.over_memory,
             device.memory_gib, s.ranked.size());
  print_table(s.ranked, static_cast<size_t>(o.top));
  fmt::print("{}", explain(s, device));
  return s.ranked.empty() ? 1 : 0;
}

}  // namespace

Command add_plan_command(CLI::App& root) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* app = root.add_subcommand("plan", "Rank parallel layouts by predicted step time and memory per device");
  app->add_option("--config", o->path, "TOML config file (its model, global batch and schedule)")->required();
  app->add_option("--set", o->overrides, "Override one key: section.key=value (repeatable)")->allow_extra_args(false);
  app->add_option("--gpus", o->gpus, "Number of devices to plan for");
  app->add_option("--gpu", o->gpu, "Device: h100 | a100 | cpu (cpu needs --profile)")
      ->check(CLI::IsMember({"h100", "a100", "cpu"}))
      ->capture_default_str();
  app->add_option("--network", o->network, "Link bandwidths in GB/s per device, e.g. nvlink=450,ib=50");
  app->add_option("--gpus-per-node", o->gpus_per_node, "Devices per node (NVLink domain); default: the device's");
  app->add_option("--profile", o->profile, "A CPU profile written by plan --measure");
  app->add_option("--top", o->top, "Layouts to print")->capture_default_str();
  app->add_flag("--given", o->given, "Predict the config's own layout only");
  app->add_flag("--json", o->json, "With --given: one JSON object");
  app->add_flag("--measure", o->measure, "Measure this machine's CPU profile (run under mpirun)");
  app->add_option("--profile-out", o->profile_out, "Where --measure writes the profile");
  return Command{app, [o] { return run_plan(*o); }, /*uses_mpi=*/true};
}

}  // namespace megatrain
