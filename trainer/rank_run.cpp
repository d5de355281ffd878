#include "trainer/rank_run.h"

#include <algorithm>

#include "config/optim_groups.h"
#include "kernels/cuda/backend.h"
#include "kernels/flat_buffer.h"
#include "kernels/ops.h"
#include "trainer/moe_totals.h"
#include "trainer/run_groups.h"

namespace megatrain {
namespace {

// The optimizer groups of config/optim_groups.h: the dense parameters over dp, the experts over the
// expert-data-parallel group (and summed over ep in the global norm: each ep rank holds others) —
// each with the cp ranks, which hold the same parameters (dp_cp, edp_cp).
std::deque<OptimGroup> make_optim_groups(const Config& c, const ProcessGroups& groups, const RankLayout& shape,
                                         const Stream& stream) {
  std::deque<OptimGroup> out;
  const Comm* ep = groups.ep().size() > 1 ? &groups.ep() : nullptr;
  const ParamLayout& layout = shape.layout;
  for (const OptimGroupSpec& g : shape.groups)
    out.emplace_back(g, layout, g.experts ? groups.edp_cp() : groups.dp_cp(), g.experts ? ep : nullptr, adamw_options(c),
                     stream);
  return out;
}

}  // namespace

RankRun::RankRun(const Config& c, const Comm& world_comm, ParamsAt params)
    : cfg_(c), stream_(run_stream(c)), groups_(process_groups(c, world_comm)),
      world_(world_comm), data_(c, groups_.dp().rank(), groups_.dp().size()), stored_layout_(gpt_param_layout(c.model)),
      shape_(rank_layout(c, groups_.tp().rank(), groups_.pp().rank(), groups_.ep().rank())),
      optim_(make_optim_groups(c, groups_, shape_, stream_)),
      grad_nan_(optim_.front().zero(), optim_.front().spec().units, optim_.front().zero().buckets(), stream_),
      tp_shared_(shape_.layout, groups_.tp(), stream_) {
  const std::vector<StageRange>& ranges = shape_.ranges;
  if (params == ParamsAt::seed) initialise();
  const TpOptions tp_options{c.parallel.sequence_parallel, c.parallel.overlap_tp_comm};
  const CpSplit split{groups_.cp().size(), groups_.cp().rank(), c.train.seq_len};
  const int T = split.local_len();
  const int64_t rows = int64_t{c.train.micro_batch_size} * T;
  const bool ends = ranges.front().embedding || ranges.back().head;  // a chunk embeds or computes the loss
  const DocumentRules rules{static_cast<int32_t>(c.data.eod_token), c.data.reset_position_ids,
                            c.data.reset_attention_mask, c.data.eod_mask_loss};
  feed_.train.emplace(split, c.train.micro_batch_size, data_.train().max_micro_batches(), ends, rules);
  if (data_.valid())
    feed_.valid.emplace(split, c.train.micro_batch_size, data_.valid()->max_micro_batches(), ends, rules);
  feed_.digest = ranges.back().head && !c.log.samples_file.empty() && groups_.tp().rank() == 0 && groups_.cp().rank() == 0;
  for (size_t k = 0; k < ranges.size(); ++k) {
    Chunk ch;
    StageExperts stage_experts;
    for (OptimGroup& g : optim_) {
      UnitState& state = g.spec().experts ? static_cast<UnitState&>(g.zero()) : static_cast<UnitState&>(grad_nan_);
      ch.units.push_back(std::make_unique<UnitSlice>(state, g.spec().chunk_units[k]));
      if (g.spec().experts) stage_experts = {ch.units.back().get(), groups_.ep()};
    }
    const StageOptions options{shape_.slots[k], shape_.split_backward, c.train.recompute, c.train.recompute_layers,
                               c.train.precision, c.train.device, c.train.bf16_activations};
    TensorParallel tp(groups_.tp(), tp_options, rows, c.model.d_model);
    StageContext context{groups_.cp(), c.parallel.cp_comm, split};
    ch.stage = std::make_unique<Stage>(c.model, c.train.micro_batch_size, T, shape_.layout, ranges[k], options,
                                       *ch.units.front(), std::move(tp), stage_experts, std::move(context));
    chunks_.push_back(std::move(ch));
  }
  for (int n : shape_.slots) peak_held_all_ += n;
  pipeline_ =
      std::make_unique<PipelineExecutor>(groups_.pp(), chunks_[0].stage->output(0).numel(), shape_.slots, stream_);
  if (c.model.tie_embeddings && groups_.pp().size() > 1) {
    Comm group = groups_.pp().split(ends ? 0 : 1, groups_.pp().rank(), "embedding");
    if (ends) tied_.emplace(std::move(group));
  }
}

Tensor RankRun::forward(int chunk, int slot, int micro, Tensor input) {
  ForwardOptions opt;
  Stage& stage = *chunks_[static_cast<size_t>(chunk)].stage;
  const StepBatch& b = *feed_.current;
  if (!feed_.evaluating) {
    opt.grad = LossGrad::in_place;
    opt.dloss_scale = static_cast<float>(feed_.loss_scale / static_cast<double>(feed_.counted));
    opt.dropout = true;
    opt.dropout_seed = cfg_.train.seed;
    opt.first_sample = static_cast<uint64_t>(data_.train().sample_index(b.batch(), micro, 0));
  }
  const DataConfig& d = cfg_.data;
  const MicroBatch mb{b.tokens(micro), b.targets(micro), opt, d.reset_position_ids ? b.starts(micro) : nullptr,
                      d.reset_attention_mask ? b.starts(micro) : nullptr};
  // The stage's mean over its rows, masked positions 0: the sum of its token losses.
  feed_.loss_sum += static_cast<double>(stage.forward(slot, mb, input)) * static_cast<double>(b.rows());
  return stage.output(slot);
}

SampleDigest RankRun::take_samples(int64_t batch) {
  const auto it = feed_.samples.find(batch);
  if (it == feed_.samples.end()) return {};
  const SampleDigest d = it->second;
  feed_.samples.erase(it);
  return d;
}

void RankRun::gradients_begin(int chunk) {
  const bool last = --chunks_[static_cast<size_t>(chunk)].backwards_left == 0;
  for (OptimGroup& g : optim_) g.gradients_begin(chunk, last);
}

void RankRun::gradients_end(int chunk) {
  for (OptimGroup& g : optim_) g.gradients_end(chunk);
}

Tensor RankRun::backward(int chunk, int slot, Tensor dout) {
  Stage& stage = *chunks_[static_cast<size_t>(chunk)].stage;
  if (shape_.split_backward) return stage.backward_input(slot, dout);  // ZeRO's hooks bracket weight()
  gradients_begin(chunk);
  const Tensor din = stage.backward(slot, dout);
  gradients_end(chunk);
  return din;
}

void RankRun::weight(int chunk, int slot) {
  gradients_begin(chunk);
  chunks_[static_cast<size_t>(chunk)].stage->backward_weights(slot);
  gradients_end(chunk);
}

double RankRun::mean_over_replicas(double sum, int64_t tokens) const {
  const Comm &pp = groups_.pp(), &dp = groups_.dp_cp();  // each cp rank's loss is over its share of the tokens
  if (pp.size() > 1) pp.all_reduce(&sum, 1).wait();  // only the last stage's is not 0
  if (dp.size() > 1) dp.all_reduce(&sum, 1).wait();
  return sum / static_cast<double>(tokens);
}

int64_t RankRun::counted_tokens(const StepBatch& batch, const BatchLoader& loader, int64_t all) const {
  if (!cfg_.data.eod_mask_loss && !loader.has_loss_mask()) return all;
  int64_t n = batch.counted();  // this rank's rows; the tp and pp ranks of a replica read the same
  if (groups_.dp_cp().size() > 1) groups_.dp_cp().all_reduce(&n, 1).wait();
  return std::max<int64_t>(n, 1);  // a batch of masked positions only adds nothing
}

double RankRun::forward_backward(int64_t batch, double loss_scale) {
  feed_.train->load(data_.train(), batch, feed_.digest);
  if (feed_.digest) feed_.samples[batch] = feed_.train->digest();
  feed_.current = &*feed_.train;
  feed_.counted = counted_tokens(*feed_.train, data_.train(), tokens_of(batch));
  feed_.loss_scale = loss_scale;
  feed_.loss_sum = 0.0;
  for (Chunk& ch : chunks_) {
    ch.backwards_left = feed_.train->micro_batches();
    ch.stage->moe_stats().reset_step_tokens();
  }
  for (OptimGroup& g : optim_) g.step_begin();
  pipeline_->run(shape_.schedules.at(feed_.train->micro_batches()), *this);
  return feed_.loss_sum / static_cast<double>(feed_.counted);
}

double RankRun::train_step(int64_t batch, double loss_scale) {
  const double share = forward_backward(batch, loss_scale);
  for (OptimGroup& g : optim_) g.finish(tied_ ? &*tied_ : nullptr, tp_shared_);
  return mean_over_replicas(share, 1);
}

bool RankRun::own_nonfinite() const {
  bool bad = false;
  for (const OptimGroup& g : optim_) bad = bad || g.zero().local_nonfinite();
  return bad;
}

bool RankRun::reduced_nonfinite() const {
  bool bad = false;
  for (const OptimGroup& g : optim_) bad = g.reduced_nonfinite() || bad;  // every group's (each waits for its own)
  return bad;
}

Overflow RankRun::first_overflow(bool loss_nonfinite) {
  const bool reduced = reduced_nonfinite(), own = own_nonfinite();
  int64_t key = overflow_key(loss_nonfinite, own, reduced, world_.rank(), world_.size());
  world_.all_reduce(&key, 1, ReduceOp::max).wait();
  return overflow_of(key, world_.size());
}

double RankRun::grad_norm() {
  std::vector<GradPart> parts;
  for (const OptimGroup& g : optim_) parts.push_back(g.grad_part());
  const Comm &tp = groups_.tp(), &pp = groups_.pp();  // each pipeline stage holds its own tensors
  return megatrain::grad_norm(stream_, parts, {tp.size() > 1 ? &tp : nullptr, pp.size() > 1 ? &pp : nullptr});
}

void RankRun::optimizer_step(float lr, double norm, float unscale) {
  const std::vector<StateStep> biases = router_bias_steps();
  for (OptimGroup& g : optim_) g.update(lr, norm, unscale, biases);
}

// Each MoE block's aux-free bias step (model/moe.h moe_update_bias) from its loads this step, summed
// over dp (tp ranks route the same rows).
std::vector<StateStep> RankRun::router_bias_steps() {
  const MoeConfig& moe = cfg_.model.moe;
  std::vector<StateStep> out;
  if (moe.aux_free_bias <= 0.0f) return out;
  for (Chunk& ch : chunks_)
    for (const MoeLayerStats& m : ch.stage->moe_stats().layers()) {
      std::vector<int64_t> load = m.step_tokens;
      if (groups_.dp_cp().size() > 1) groups_.dp_cp().all_reduce(load.data(), moe.n_experts).wait();
      const size_t i = shape_.layout.index_of("layers." + std::to_string(m.layer) + ".moe.router.bias");
      StateStep& s = out.emplace_back(StateStep{{shape_.layout.offset(i), shape_.layout.offset(i) + moe.n_experts},
                                                std::vector<float>(static_cast<size_t>(moe.n_experts))});
      moe_update_bias(s.delta.data(), load.data(), moe.n_experts, moe.aux_free_bias);
    }
  return out;
}

void RankRun::set_step_count(int64_t t) {
  for (OptimGroup& g : optim_) g.set_step_count(t);
}

void RankRun::params_written() {
  for (OptimGroup& g : optim_) g.params_written();
}

void RankRun::initialise() {
  for (OptimGroup& g : optim_) g.initialise(cfg_.model, cfg_.train.seed);
}

void RankRun::state_written() {
  for (OptimGroup& g : optim_) g.state_written();
}

FlatSlice RankRun::held_params_host(size_t group) {
  const HostSlice s = optim_.at(group).held_params_host();
  return {s.data, s.range.begin, s.range.end};
}

CheckpointTensors RankRun::checkpoint_tensors() {
  CheckpointTensors t{&shape_.layout, &stored_layout_, {}};
  const auto slice = [](const HostSlice& s) { return FlatSlice{s.data, s.range.begin, s.range.end}; };
  for (OptimGroup& g : optim_) {
    const HostState h = g.host_state();
    t.pieces.push_back({slice(h.params), slice(h.exp_avg), slice(h.exp_avg_sq), h.partition.begin, h.partition.end,
                        g.spec().begin});
    if (h.keep) t.keep.push_back(h.keep);
  }
  return t;
}

size_t RankRun::activation_bytes() const {
  size_t bytes = 0;
  for (const Chunk& ch : chunks_) bytes += ch.stage->activation_bytes();
  return bytes;
}

MemoryMetrics RankRun::memory() const {
  MemoryMetrics m;
  for (const OptimGroup& g : optim_) {
    const ZeroMemory z = g.memory();
    m.params += z.params, m.master_params += z.master_params, m.grads += z.grads, m.comm_buffers += z.comm_buffers;
    m.optimizer += g.optimizer_bytes();
  }
  m.activations = static_cast<int64_t>(activation_bytes());
  m.gemm_scratch = matmul_scratch_bytes(stream_);
  m.peak_rss = peak_rss_bytes();
  if (on_device()) m.device_peak = cuda_backend().memory_stats().peak_allocated;
  return m;
}

double RankRun::moe_dispatch_ms() const {
  double ms = 0.0;
  for (const Chunk& ch : chunks_) ms += ch.stage->moe_stats().dispatch_ms();
  return ms;
}

std::vector<MoeLayerStats> RankRun::moe_stats() {
  std::vector<MoeStats*> stages;
  for (Chunk& ch : chunks_) stages.push_back(&ch.stage->moe_stats());
  return moe_totals(cfg_.model, stages, groups_.tp().rank() == 0, world_);
}

double RankRun::evaluate() {
  const int micro = data_.valid()->max_micro_batches();
  feed_.evaluating = true;
  feed_.loss_sum = 0.0;
  feed_.current = &*feed_.valid;
  int64_t tokens = 0;
  for (int64_t batch = 0; batch < cfg_.train.eval_steps; ++batch) {
    feed_.valid->load(*data_.valid(), batch, false);
    tokens += counted_tokens(*feed_.valid, *data_.valid(), tokens_per_step());
    pipeline_->run_forward(micro, *this);
  }
  feed_.evaluating = false;
  return mean_over_replicas(feed_.loss_sum, tokens);
}

void RankRun::reset_comm_stats() const {
  for (const Comm* c : {&groups_.dp_cp(), &groups_.tp(), &groups_.pp(), &groups_.ep(), &groups_.edp_cp(), &groups_.cp(), &world_})
    c->reset_stats();
  if (cfg_.parallel.zero_hpz_partition_size > 1) optim_.front().zero().hpz_comm().reset_stats();
}

StepComm RankRun::comm_stats() const {
  StepComm c{groups_.dp_cp().stats(), groups_.tp().stats(), groups_.pp().stats(), groups_.ep().stats(), world_.stats(),
             groups_.cp().stats()};
  c.dp += groups_.edp_cp().stats();
  if (cfg_.parallel.zero_hpz_partition_size > 1) {
    const CommStats h = optim_.front().zero().hpz_comm().stats();
    c.dp += h;
    c.hpz_bytes = h.bytes_moved;
  }
  return c;
}

}  // namespace megatrain
