// Fault injection: one switch, MEGATRAIN_FAULT, read by every rank (docs/robustness.md C0; the model
// is nvrx's inject_fault and Megatron's FaultInjectorConfig). Syntax:
//
//   MEGATRAIN_FAULT="KIND:key=value:key=value;KIND:…"
//
//   slow:rank=R:ms=M[:from_step=A][:to_step=B][:every=K]
//                                                sleep M ms at the start of steps A, A + K, A + 2K, …
//                                                up to B (default A = 1, B = no end, K = 1): a
//                                                straggler (K = 1, logged at step A only) or a rank
//                                                that hiccups every K steps (logged each time)
//   kill:rank=R:step=S[:sig=9]                   the rank sends itself signal SIG at the start of step S
//   hang:rank=R:step=S[:how=sigstop]             at the start of step S: sigstop (the process
//                                                stops), spin (a busy loop: alive, no progress) or
//                                                sleep (blocked forever); S = 0: before training
//                                                starts (an initialisation hang); freeze: the
//                                                process stops inside the step's first collective
//                                                it waits in (a paused VM or container, a host
//                                                stall: its peers see it arrived)
//   exc:rank=R:step=S[:extra_collective=1]       an exception at the start of step S; with
//                                                extra_collective=1 instead one all-reduce over the
//                                                world that no other rank issues (a desync)
//   nan:rank=R:step=S[:where=grad][:element=E]   in step S: NaN gradients (grad: every one, from a
//                                                NaN loss scale; with element = first, middle or
//                                                last, one value of that flat element of the dense
//                                                gradients, health/grad_nan_injector.h) or this
//                                                rank's loss NaN (loss)
//   spike:rank=*:step=S:factor=F                 the step's loss, as every rank sees it, is F times
//                                                larger (a loss spike; every rank, so all decide alike)
//   bitflip:rank=R:step=S:tensor=NAME            after the update of step S, one bit of the first
//                                                value of parameter NAME flips on that rank (a
//                                                silent memory error)
//   ckpt_crash:rank=R:step=S:phase=P             the rank kills itself (SIGKILL) while saving step S:
//                                                mid_shard_write (any rank), after_shard_before_commit
//                                                or after_commit_before_latest (rank 0, which commits)
//   ckpt_slow:ms=M[:rank=R]                      every checkpoint write, and every memory snapshot's
//                                                copy, takes M ms longer
//   selfcheck_slow:rank=R:factor=F               `megatrain selfcheck`'s GEMM runs F times on rank R
//   peak_slow:ms=M[:rank=R]                      every timing of the start-up MFU peak measurement
//                                                (trainer/peak_flops.h) takes M ms longer: a peak
//                                                measured while the cores were busy
//   random:seed=S:mtti_s=T:kinds=K,K,…           random faults (health/fault_random.h)
//
// rank = an integer or * (every rank); step = S or a range A..B (nan, exc, kill, hang fire at each
// step of it). Every kind also takes attempt=N or * (default 1): the launch it acts in, counted by
// the resilient driver in MEGATRAIN_ATTEMPT (1 when unset), so a fault does not strike again in the
// run restarted to recover from it unless asked to. Steps are numbered from 1, as logged. Every injection prints one line
// `FAULT_INJECTED kind=K rank=R step=S … t_wall=T` on stderr before it acts, so tests tell injection from
// detection. A malformed value is an InputError naming the variable and the expected form.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace megatrain {

enum class FaultKind { slow, kill, hang, exc, nan, spike, bitflip, ckpt_crash, ckpt_slow, selfcheck_slow,
                       peak_slow };

struct Fault {
  FaultKind kind = FaultKind::slow;
  int rank = -1;  // -1 = every rank
  int64_t first_step = 1, last_step = std::numeric_limits<int64_t>::max();
  int64_t ms = 0;      // slow, ckpt_slow, peak_slow
  int64_t every = 1;   // slow: acts at first_step + every·k only
  int sig = 9;         // kill
  int factor = 1;      // selfcheck_slow, spike
  std::string detail;  // hang: how; nan: where; bitflip: tensor; ckpt_crash: phase; exc: "extra_collective" or ""
  std::string element;  // nan where=grad: "first", "middle" or "last" (one NaN value); "" = every gradient
  int attempt = 1;     // the launch it acts in; -1 = every launch
  bool on(int r, int64_t step) const {
    return (rank < 0 || rank == r) && step >= first_step && step <= last_step && (step - first_step) % every == 0;
  }
};

class RandomFaults;  // health/fault_random.h

// Thread-safe: the checkpoint writer looks faults up while the training loop arms random ones.
class FaultPlan {
 public:
  // The faults of `spec` (MEGATRAIN_FAULT syntax) that act in launch `attempt`; "" = none. Throws
  // InputError.
  static FaultPlan parse(const std::string& spec, int attempt = 1);
  // MEGATRAIN_FAULT for launch MEGATRAIN_ATTEMPT, parsed on first use (the same plan for the
  // process's life).
  static FaultPlan& from_environment();
  ~FaultPlan();

  // The first fault of `kind` for rank `rank` at `step` (ckpt_slow, selfcheck_slow and peak_slow,
  // which take no step, act at every step), or nullptr. The pointer stays valid for the plan's life.
  const Fault* find(FaultKind kind, int rank, int64_t step) const;
  // Random mode (health/fault_random.h): adds the faults due by now, acting from `step`, for a
  // world of `world` ranks; the clock starts at the first call.
  void arm_random(int64_t step, int world);

 private:
  FaultPlan(std::deque<Fault> faults, std::unique_ptr<RandomFaults> random);
  mutable std::mutex mu_;
  std::deque<Fault> faults_;  // a deque: find's pointers survive additions
  std::unique_ptr<RandomFaults> random_;
  std::chrono::steady_clock::time_point armed_since_{};
  bool armed_ = false;
};

const char* fault_kind_name(FaultKind k);

// Prints `FAULT_INJECTED kind=K rank=R step=S DETAIL t_wall=UNIX_SECONDS` on stderr and flushes it.
void log_injection(const Fault& f, int rank, int64_t step, const std::string& detail = "");

}  // namespace megatrain
