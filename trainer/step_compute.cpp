#include "trainer/step_compute.h"

#include <algorithm>

#include "trainer/rank_run.h"
#include "trainer/run_state.h"

namespace megatrain {
namespace {

class SyncStep final : public StepCompute {
 public:
  SyncStep(RankRun& run, const RunState& at) : run_(run), at_(at) {}
  double loss(int64_t step, double loss_scale) override { return run_.train_step(step + at_.data_skip, loss_scale); }
  Overflow first_overflow(bool loss_nonfinite) override { return run_.first_overflow(loss_nonfinite); }

 private:
  RankRun& run_;
  const RunState& at_;
};

class StaleStep final : public StepCompute {
 public:
  StaleStep(const Config& cfg, RankRun& run, const RunState& at, std::function<int64_t(int64_t)> horizon)
      : s_(cfg.parallel.max_staleness), run_(run), at_(at), horizon_(std::move(horizon)) {}

  // Every batch up to step + s not yet computed, and below the horizon, is computed on the current
  // parameters and its reductions (gradients, loss, overflow key) queued; then the step's own are
  // waited for and its reduced gradients become the optimizer's.
  double loss(int64_t step, double /*loss_scale: fp16 is refused with staleness*/) override {
    const int64_t horizon = horizon_(step);
    MT_CHECK(step < horizon, "a stale step {} needs a horizon after it ({})", step, horizon);
    if (queued_.empty()) next_ = step;
    const Comm &world = run_.world(), &dp = run_.groups().dp_cp();
    for (; next_ <= std::min(step + s_, horizon - 1); ++next_) {
      Scalars& q = queued_.emplace_back();
      q.loss = run_.forward_backward(next_ + at_.data_skip, 1.0);
      for (OptimGroup& g : run_.optim_groups()) g.zero().defer_reduction();
      q.key = overflow_key(false, run_.own_nonfinite(), false, world.rank(), world.size());
      if (dp.size() > 1) q.loss_work = dp.all_reduce(&q.loss, 1);
      q.key_work = world.all_reduce(&q.key, 1, ReduceOp::max);
    }
    for (OptimGroup& g : run_.optim_groups()) g.zero().retire_reduction();
    Scalars& q = queued_.front();
    q.loss_work.wait();
    q.key_work.wait();
    key_ = q.key;
    const double loss = q.loss;  // the sum of the ranks' shares
    queued_.pop_front();
    return loss;
  }

  // Reduced when queued; the reduced gradients are alike everywhere.
  Overflow first_overflow(bool /*loss_nonfinite: nan faults strike synchronous steps only*/) override {
    const int ranks = run_.world().size();
    return overflow_of(std::max(key_, overflow_key(false, false, run_.reduced_nonfinite(), 0, ranks)), ranks);
  }

  void finish() override {
    for (OptimGroup& g : run_.optim_groups()) g.zero().discard_reductions();
    for (const Scalars& q : queued_) {
      q.loss_work.wait();
      q.key_work.wait();
    }
    queued_.clear();
  }

 private:
  // A queued step's loss share and overflow key, each reduced in place by its Work; a deque keeps their
  // addresses while later ones are queued.
  struct Scalars {
    double loss = 0.0;
    int64_t key = 0;
    Work loss_work, key_work;
  };
  const int s_;
  RankRun& run_;
  const RunState& at_;
  std::function<int64_t(int64_t)> horizon_;
  std::deque<Scalars> queued_;
  int64_t next_ = 0;  // the next step whose batch is computed
  int64_t key_ = 0;   // the retired step's reduced overflow key
};

}  // namespace

std::unique_ptr<StepCompute> make_step_compute(const Config& cfg, RankRun& run, const RunState& at,
                                               std::function<int64_t(int64_t)> horizon) {
  if (cfg.parallel.max_staleness > 0) return std::make_unique<StaleStep>(cfg, run, at, std::move(horizon));
  return std::make_unique<SyncStep>(run, at);
}

}  // namespace megatrain
