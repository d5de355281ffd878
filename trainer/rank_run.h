// What one rank trains: its data loaders, its model chunks (one pipeline stage, or several virtual
// stages of an interleaved pipeline, over one parameter layout), its optimizer groups (the dense
// parameters, and an MoE model's experts: optim/optim_group.h), and the PipelineWork the executor
// drives through a step's schedule. The step loop (trainer/train.cpp) computes a step through a
// StepCompute (trainer/step_compute.h: train_step, or forward_backward with bounded staleness),
// then calls grad_norm, optimizer_step and evaluate.
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
//
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/rank_layout.h"
#include "health/grad_nan_injector.h"
#include "model/stage.h"
#include "model/tp_shared.h"
#include "optim/clip.h"
#include "optim/optim_group.h"
#include "parallel/groups.h"
#include "parallel/pipeline.h"
#include "trainer/checkpoint.h"
#include "trainer/metrics.h"
#include "trainer/sample_digest.h"
#include "trainer/step_batch.h"
#include "trainer/train_data.h"

namespace megatrain {

class RankRun final : public PipelineWork {
 public:
  // The parameters are drawn from train.seed at construction, or with ParamsAt::load left for a
  // checkpoint load to write (a resume, whose start-up then skips the draw): the caller then calls
  // initialise() when nothing was loaded.
  enum class ParamsAt { seed, load };
  RankRun(const Config& c, const Comm& world, ParamsAt params = ParamsAt::seed);
  // Every optimizer group's parameters drawn from train.seed (model/params.h), then params_written().
  void initialise();

  // Forward + backward over this rank's micro-batches of `step` through the pipeline, gradients
  // reduced over the data-parallel ranks (optim/zero_state.h), the loss gradient multiplied by
  // loss_scale (fp16). Returns the mean loss over the global batch.
  double train_step(int64_t batch, double loss_scale = 1.0);
  // Forward + backward of global batch `batch` through the pipeline, the gradients' reductions
  // issued as their buckets fill; this rank's share of the mean loss (its token losses over the
  // tokens the global batch counts): summed over the pp and dp × cp ranks, the step's loss.
  double forward_backward(int64_t batch, double loss_scale);
  // Where this step's first Inf/NaN came from (optim/clip.h [Note: overflow origin]), over the world;
  // `loss_nonfinite`: this rank's own loss.
  Overflow first_overflow(bool loss_nonfinite = false);
  // Whether this rank's gradients of the step hold an Inf/NaN: its own before their reduction, or
  // the reduced ones (only once the reduction is complete).
  bool own_nonfinite() const;
  bool reduced_nonfinite() const;
  // MEGATRAIN_FAULT nan with element=E: one NaN in the dense gradients of the coming step
  // (health/grad_nan_injector.h); returns what the injection's log line says of it.
  std::string arm_grad_nan(const std::string& element) { return grad_nan_.arm(element); }
  // Global L2 norm of the step's gradient: every global parameter counted once (optim/clip.h).
  double grad_norm();
  // Every group's update: lr, the global norm of the unscaled gradient (for clipping), 1 / the
  // loss scale; the aux-free router biases step first (moe.aux_free_bias).
  void optimizer_step(float lr, double norm, float unscale);
  // After the parameters were written through held_params_host() or checkpoint_tensors(), or at
  // initialisation: on a device, send the host copy of the parameters up; then hand them to ZeRO.
  void params_written();
  // With log.samples_file: what this rank read of global batch `batch` (trainer/sample_digest.h, trainer/sample_log.h),
  // forgotten once taken; nothing when it read none of it.
  SampleDigest take_samples(int64_t batch);
  // After a load wrote parameters and moments through checkpoint_tensors(): on a device, send the
  // moments up too; then params_written().
  void state_written();
  void set_step_count(int64_t t);  // the optimizer's update count, when resuming
  // Per MoE block of the model: its routing this step, summed over every replica's micro-batches
  // (the same on every rank; collective over the world). Empty for a dense model.
  std::vector<MoeLayerStats> moe_stats();
  // This rank's milliseconds moving tokens in MoE blocks since the last moe_stats() (model/moe.h).
  double moe_dispatch_ms() const;
  // Zeroes the communicators' counters; comm_stats(): what they counted since, by group.
  void reset_comm_stats() const;
  StepComm comm_stats() const;
  // Mean loss over the first eval_steps global batches of the validation set (same each time).
  double evaluate();

  // This rank's parameters and moments for checkpoints, one piece per optimizer group, in host
  // memory: on a device a copy made now ([Note: a run on a device]); write through it, then call
  // state_written().
  CheckpointTensors checkpoint_tensors();
  // The parameters this rank holds of optimizer group `group` (0: the dense ones, 1: an MoE model's
  // experts), in host memory: on a device a copy of them made now, the moments left where they are
  // (the replica check, fault injection).
  FlatSlice held_params_host(size_t group = 0);
  const std::deque<OptimGroup>& optim_groups() const { return optim_; }
  std::deque<OptimGroup>& optim_groups() { return optim_; }
  MemoryMetrics memory() const;
  size_t activation_bytes() const;
  // Tokens of a full global batch; tokens_of: of global batch `batch` (smaller on a batch ramp).
  int64_t tokens_per_step() const {
    return static_cast<int64_t>(cfg_.train.global_batch_size) * cfg_.train.seq_len;
  }
  int64_t tokens_of(int64_t batch) const { return data_.train().sizes().size(batch) * cfg_.train.seq_len; }
  // The most micro-batches whose activations this rank holds at once (all chunks).
  int held_micro_batches() const { return peak_held_all_; }
  bool on_device() const { return stream_.device != Device::cpu; }

  Tensor forward(int chunk, int slot, int micro, Tensor input) override;
  Tensor backward(int chunk, int slot, Tensor dout) override;
  void weight(int chunk, int slot) override;

  const Config& config() const { return cfg_; }
  const Stream& stream() const { return stream_; }  // where this rank computes ([Note: a run on a device])
  const ProcessGroups& groups() const { return groups_; }
  const Comm& world() const { return world_; }
  const TrainData& data() const { return data_; }
  const ParamLayout& stored_layout() const { return stored_layout_; }  // the global tensors checkpoints hold
  // What this rank holds (config/rank_layout.h): model chunks, schedule, parameter layout, groups.
  const RankLayout& shape() const { return shape_; }
  const ParamLayout& layout() const { return shape_.layout; }

 private:
  struct Chunk {
    std::vector<std::unique_ptr<UnitSlice>> units;  // per optimizer group
    std::unique_ptr<Stage> stage;
    int backwards_left = 0;  // in the running step
  };
  // What the micro-batches read and add to: the step's batch, loaded before the schedule runs
  // (trainer/step_batch.h), the loss.
  struct Feed {
    std::optional<StepBatch> train, valid;  // the training and validation batches' buffers
    const StepBatch* current = nullptr;     // the one the running schedule reads
    bool digest = false;                    // log.samples_file, on the rank that reports what it read
    double loss_sum = 0.0, loss_scale = 1.0;  // the sum of token losses
    int64_t counted = 1;                      // the step's tokens the loss counts, over every replica
    bool evaluating = false;
    // With log.samples_file: what this rank read of each global batch not yet logged (the batches
    // computed ahead of their step too: trainer/step_compute.h [Note: stale-synchronous step]).
    std::map<int64_t, SampleDigest> samples = {};
  };
  // The mean token loss from this rank's sum of token losses over `tokens` counted over all replicas.
  double mean_over_replicas(double sum, int64_t tokens) const;
  // The tokens the loss counts in `batch`, read from `loader`, over all replicas: `all` unless
  // data.eod_mask_loss or the data's loss mask leave some out.
  int64_t counted_tokens(const StepBatch& batch, const BatchLoader& loader, int64_t all) const;
  // Each group's hook before the step that writes the chunk's final gradients of a micro-batch (its
  // backward, or its weight step when backwards are split); gradients_end() closes it.
  void gradients_begin(int chunk);
  void gradients_end(int chunk);
  // moe.aux_free_bias: each MoE block's router bias moved towards balance by the step's loads.
  std::vector<StateStep> router_bias_steps();

  const Config& cfg_;
  const Stream stream_;
  ProcessGroups groups_;
  const Comm world_;
  TrainData data_;
  ParamLayout stored_layout_;
  RankLayout shape_;
  std::deque<OptimGroup> optim_;  // the dense parameters, then an MoE model's experts
  GradNanInjector grad_nan_;      // between the chunks' unit views and the dense group's state
  std::vector<Chunk> chunks_;
  TpSharedParams tp_shared_;
  std::unique_ptr<PipelineExecutor> pipeline_;
  int peak_held_all_ = 0;
  // The first and last stage when a tied embedding spans them (Megatron's embedding group).
  std::optional<Comm> tied_;
  Feed feed_;
};

}  // namespace megatrain
