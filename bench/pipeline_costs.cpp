// What each pipeline schedule should idle, from this machine's own step costs: times one middle
// pipeline stage (no embedding or head) of the given shape — forward F, input-gradient backward B
// and weight-gradient backward W of one micro-batch, median of --reps — and plays every schedule
// with those costs in the simulator (parallel/pipeline_schedule.h). Prints, per schedule, each
// stage's predicted idle time in one training step (makespan − its busy time, ms) and the bubble
// share, as lines `predicted SCHEDULE idle0 idle1 … bubble`, for bench/pipeline.sh to set beside
// the idle times the trainer measured. The interleaved schedule's chunks (half the stage's
// blocks) are timed on their own. One thread: run with OMP_NUM_THREADS=1, as the ranks do.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <vector>

#include "bench/measure.h"
#include "kernels/flat_buffer.h"
#include "kernels/rng.h"
#include "model/stage.h"
#include "parallel/pipeline_schedule.h"

using namespace megatrain;
using bench::median;
using Clock = std::chrono::steady_clock;

namespace {

// Median seconds of F, B and W of a middle stage of `layers` blocks.
StepCosts time_stage(const ModelConfig& cfg, int layers, int B, int T, int reps) {
  const StageRange range{0, layers, false, false};
  const ParamLayout layout = gpt_param_layout(cfg, TpCoord{}, false, range);
  FlatBuffer params(layout.total()), grads(layout.total());
  init_params(layout, params.data(), cfg, 1);
  FullState state(gpt_param_units(layout, range), params.data(), grads.data());
  Stage stage(cfg, B, T, layout, range, StageOptions{1, true}, state, TensorParallel(int64_t{B} * T, cfg.d_model));
  std::vector<float> x(static_cast<size_t>(B) * T * cfg.d_model), dy(x.size());
  const RngKey k{1, static_cast<uint32_t>(RngPurpose::test), 0, 0};
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = rng_normal(k, 2 * i);
    dy[i] = 1e-3f * rng_normal(k, 2 * i + 1);
  }
  const Tensor input(x.data(), Shape{int64_t{B} * T, cfg.d_model}), dout(dy.data(), input.shape);
  ForwardOptions opt;
  opt.grad = LossGrad::in_place;
  std::vector<double> f, b, w;
  for (int r = 0; r <= reps; ++r) {  // the first is a warm-up
    const auto t0 = Clock::now();
    stage.forward(0, MicroBatch{nullptr, nullptr, opt}, input);
    const auto t1 = Clock::now();
    stage.backward_input(0, dout);
    const auto t2 = Clock::now();
    stage.backward_weights(0);
    const auto t3 = Clock::now();
    if (r == 0) continue;
    f.push_back(std::chrono::duration<double>(t1 - t0).count());
    b.push_back(std::chrono::duration<double>(t2 - t1).count());
    w.push_back(std::chrono::duration<double>(t3 - t2).count());
  }
  return {median(f), median(b), median(w)};
}

void predict(const std::string& name, const PipeShape& shape, const StepCosts& costs) {
  std::vector<std::vector<PipeStep>> lists;
  for (int s = 0; s < shape.stages; ++s) lists.push_back(pipeline_schedule(name, s, shape));
  const ScheduleStats st = simulate(lists, shape, costs);
  std::string idle;
  for (int s = 0; s < shape.stages; ++s) idle += fmt::format(" {:.1f}", 1e3 * (st.makespan - st.busy[static_cast<size_t>(s)]));
  fmt::print("predicted {}{} {:.4f}\n", name, idle, st.bubble);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pipeline_costs: per-stage idle each schedule should show, from measured F, B, W"};
  ModelConfig cfg;
  cfg.vocab_size = 257;
  int stages = 4, micro_batches = 8, B = 1, T = 256, reps = 5;
  app.add_option("--layers", cfg.n_layers, "blocks of the whole model")->default_val(8);
  app.add_option("--d-model", cfg.d_model)->default_val(384);
  app.add_option("--heads", cfg.n_heads)->default_val(6);
  app.add_option("--stages", stages)->default_val(4);
  app.add_option("--micro-batches", micro_batches)->default_val(8);
  app.add_option("--micro-batch-size", B)->default_val(1);
  app.add_option("--seq-len", T)->default_val(256);
  app.add_option("--reps", reps)->default_val(5);
  CLI11_PARSE(app, argc, argv);
  cfg.max_seq_len = T;
  const int per_stage = cfg.n_layers / stages;
  const StepCosts stage = time_stage(cfg, per_stage, B, T, reps), chunk = time_stage(cfg, per_stage / 2, B, T, reps);
  fmt::print("stage of {} blocks: F {:.1f} ms, B {:.1f} ms, W {:.1f} ms; chunk of {}: F {:.1f}, B {:.1f}, W {:.1f}\n",
             per_stage, 1e3 * stage.forward, 1e3 * stage.input_grad, 1e3 * stage.weight_grad, per_stage / 2,
             1e3 * chunk.forward, 1e3 * chunk.input_grad, 1e3 * chunk.weight_grad);
  for (const char* name : {"gpipe", "1f1b", "zero_bubble"}) predict(name, {stages, micro_batches, 1}, stage);
  predict("interleaved", {stages, micro_batches, 2}, chunk);
}
