// What one rank trains: its data loaders, its model chunks (one pipeline stage, or several virtual
// stages of an interleaved pipeline, over one parameter layout and one ZeRO state), the optimizer
// over its shard, and the PipelineWork the executor drives through a step's schedule. The step
// loop (trainer/train.cpp) calls train_step, grad_norm, the optimizer and evaluate.
//
// [Note: a run on a device] With train.device = "cuda" the rank's compute stream is the device's
// default stream: the stages' activations, ZeRO's buffers (optim/zero_plan.h [Note: ZeRO on a
// device]), the optimizer's moments, the pipeline's message buffers and the tensor-parallel
// packing buffer are device memory, and the gradient checks (Inf/NaN, Σ g²) are ops on the stream.
// The communicators move device buffers: NCCL's (parallel/comm_nccl.h, which also picks the rank's
// GPU by its local rank), or MPI's where the backend's memory is host memory (the host emulation
// of the tests, kernels/cuda/backend.h host_addressable). Tokens go up per micro-batch; the loss
// comes down per micro-batch, norms and flags per step. What reads or writes the state on the host
// (checkpoints, the replica check, fault injection) goes through checkpoint_tensors() or
// held_params_host(), which on a device are host copies made by the call (the parameters and
// moments, or the parameters alone), and state_written() or params_written(), which send them back.
#pragma once
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "health/grad_nan_injector.h"
#include "model/optimizer.h"
#include "model/stage.h"
#include "model/tp_shared.h"
#include "optim/clip.h"
#include "optim/zero_state.h"
#include "parallel/groups.h"
#include "parallel/pipeline.h"
#include "trainer/checkpoint.h"
#include "trainer/config.h"
#include "trainer/metrics.h"
#include "trainer/optim_groups.h"
#include "trainer/train_data.h"

namespace megatrain {

// The blocks of virtual stage `vs` of pp · virtual_stages: parallel.pipeline_layers, or an even
// split (both checked by the config); the embedding on the first, the head on the last.
StageRange virtual_stage_range(const Config& c, int vs);

class RankRun final : public PipelineWork {
 public:
  RankRun(const Config& c, const Comm& world);

  // Forward + backward over this rank's micro-batches of `step` through the pipeline, gradients
  // reduced over the data-parallel ranks (optim/zero_state.h), the loss gradient multiplied by
  // loss_scale (fp16). Returns the mean loss over the global batch.
  double train_step(int64_t batch, double loss_scale = 1.0);
  // [Note: stale-synchronous step] (trainer/rank_run_stale.cpp), parallel.max_staleness = s > 0:
  // the update of 0-based step `step` is built from global batch step + data_skip. Before it,
  // every batch up to step + s not yet computed, and below `horizon` (the next step at which no
  // reduction may be in flight: a save, the run's end), is computed on the current parameters
  // and its reductions (gradients, loss, overflow key) queued; then the step's own are waited
  // for and its reduced gradients become zero.optimizer_grads(). Returns the step's mean loss.
  double stale_step(int64_t step, int64_t data_skip, int64_t horizon);
  // Waits for the queued reductions and drops them (a stop between two horizons).
  void stale_discard();
  // Where this step's first Inf/NaN came from, the same on every rank (robustness spec R16): the
  // lowest rank whose own loss (`loss_nonfinite`) or own gradients before the data-parallel
  // reduction held one; failing that, the lowest rank whose reduced gradients do (an overflow in
  // the reduction itself). rank −1 when all are finite.
  struct Overflow {
    int rank = -1;
    const char* where = "";  // "loss", "grad" (before reduction) or "reduced grad"
  };
  Overflow first_overflow(bool loss_nonfinite = false);
  // MEGATRAIN_FAULT nan with element=E: one NaN in the dense gradients of the coming step
  // (health/grad_nan_injector.h); returns what the injection's log line says of it.
  std::string arm_grad_nan(const std::string& element) { return grad_nan_.arm(element); }
  // Global L2 norm of the step's gradient: every global parameter counted once (optim/clip.h).
  double grad_norm();
  // The optimizer's update of every parameter this rank updates (dense and expert), then ZeRO's
  // step_end: lr, the global norm of the unscaled gradient (for clipping), 1 / the loss scale.
  void optimizer_step(float lr, double norm, float unscale);
  // After the parameters were written through held_params_host() or checkpoint_tensors(), or at
  // initialisation: on a device, send the host copy of the parameters up; then hand them to ZeRO.
  void params_written();
  // After a load wrote parameters and moments through checkpoint_tensors(): on a device, send the
  // moments up too; then params_written().
  void state_written();
  void set_step_count(int64_t t);  // the optimizer's update count, when resuming
  // Per MoE block of the model: its routing this step, summed over every replica's micro-batches
  // (the same on every rank; collective over the world). Empty for a dense model.
  std::vector<MoeLayerStats> moe_stats();
  // This rank's milliseconds moving tokens in MoE blocks since the last moe_stats() (model/moe.h).
  double moe_dispatch_ms() const;
  // Mean loss over the first eval_steps global batches of the validation set (same each time).
  double evaluate();

  // This rank's parameters and moments for checkpoints, in host memory: on a device a copy made
  // now ([Note: a run on a device]); write through it, then call state_written().
  CheckpointTensors checkpoint_tensors();
  // The parameters alone (zero.held_params_range()), in host memory: on a device a copy of them
  // made now, the moments left where they are (the replica check, fault injection).
  FlatSlice held_params_host();
  MemoryMetrics memory() const;
  size_t activation_bytes() const;
  int64_t tokens_per_step() const {
    return static_cast<int64_t>(cfg.train.global_batch_size) * cfg.train.seq_len;
  }
  // The most micro-batches whose activations this rank holds at once (all chunks).
  int held_micro_batches() const { return peak_held_all_; }

  Tensor forward(int chunk, int slot, int micro, Tensor input) override;
  Tensor backward(int chunk, int slot, Tensor dout) override;
  void weight(int chunk, int slot) override;

  const Config& cfg;
  const Stream stream;  // where this rank computes ([Note: a run on a device])
  bool on_device() const { return stream.device != Device::cpu; }
  ProcessGroups groups;
  const Comm& dp_comm;
  const Comm& tp_comm;
  const Comm& pp_comm;
  const Comm world;
  int dp_rank, dp;
  TrainData data;
  std::vector<StageRange> ranges;  // per model chunk
  std::vector<PipeStep> steps;     // this rank's schedule of one training step
  ParamLayout layout;
  std::vector<int> chunk_units;    // chunk k's units in zero: [chunk_units[k], chunk_units[k + 1])
  ParamLayout stored_layout;       // the global tensors checkpoints hold
  ZeroState zero;
  AdamW optimizer;
  // The expert tensors of MoE blocks ([Note: expert tensors] in model/params.h): flat range
  // [begin, layout.total()), with a ZeRO state of their own over the expert-data-parallel group
  // (parallel/groups.h) and their own optimizer. Absent for a dense model.
  struct Experts {
    Experts(const ParamLayout& layout, const OptimGroupSpec& g, const Comm& edp, const AdamWOptions& a);
    int64_t begin;               // dense_end(layout): their state's flat element 0
    std::vector<int> chunk_units;  // chunk k's expert units: [chunk_units[k], chunk_units[k + 1])
    ZeroState zero;
    AdamW optimizer;
  };
  std::unique_ptr<Experts> experts;

 private:
  struct Chunk {
    std::unique_ptr<UnitSlice> units, expert_units;
    std::unique_ptr<Stage> stage;
    int backwards_left = 0;            // in the running step
  };
  double mean_over_replicas(double sum, int micro) const;
  // Forward + backward of global batch `batch` through the pipeline; this rank's loss sum.
  double forward_backward(int64_t batch, double loss_scale);
  // [Note: stale-synchronous step]: a queued step's loss sum and overflow key (first_overflow's),
  // each reduced in place by its Work; a deque keeps their addresses while later ones are queued.
  struct StaleScalars {
    double loss = 0.0;
    int64_t key = 0;
    Work loss_work, key_work;
  };
  std::deque<StaleScalars> stale_;
  int64_t stale_next_ = 0;        // the next step whose batch is computed
  int64_t stale_key_ = 0;         // the retired step's reduced overflow key
  // ZeRO's hook before the step that writes the chunk's final gradients of a micro-batch (its
  // backward, or its weight step when backwards are split); micro_batch_end() closes it.
  void gradients_begin(int chunk);
  void gradients_end(int chunk);
  // moe.aux_free_bias: each MoE block's router bias moved towards balance by the step's loads.
  void update_router_biases();
  bool chunk_has_experts(int chunk) const;

  // [Note: a run on a device]: the host copy of the held parameters and the moments.
  struct HostState {
    std::vector<float> params, exp_avg, exp_avg_sq;
    std::vector<float> expert_params, expert_exp_avg, expert_exp_avg_sq;  // MoE models: the experts' piece
  };
  std::unique_ptr<HostState> host_state_;
  GradNanInjector grad_nan_;        // between the chunks' unit views and zero
  bool split_backward_;             // the schedule has weight steps (zero-bubble)
  std::vector<Chunk> chunks_;
  TpSharedParams tp_shared_;
  std::unique_ptr<PipelineExecutor> pipeline_;
  int peak_held_all_ = 0;
  // The first and last stage when a tied embedding spans them (Megatron's embedding group), and
  // where this rank's embedding (or copy of it) lies in the layout.
  std::optional<Comm> embedding_comm_;
  FlatRange embedding_range_;
  std::vector<int32_t> inputs_, targets_;
  int64_t batch_ = 0;  // the global batch train_step trains on
  double loss_sum_ = 0.0;
  double loss_scale_ = 1.0;
  bool evaluating_ = false;
  int64_t eval_batch_ = 0;
};

}  // namespace megatrain
