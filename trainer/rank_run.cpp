#include "trainer/rank_run.h"

#include <algorithm>
#include <cmath>

#include "kernels/cuda/backend.h"
#include "kernels/ops.h"
#ifdef MEGATRAIN_HAS_CUDA
#include "parallel/comm_nccl.h"
#endif

namespace megatrain {
namespace {

ParallelDims parallel_dims(const Config& c) {
  const ParallelConfig& p = c.parallel;
  return ParallelDims{.tp = p.tp, .cp = p.cp, .ep = p.ep, .dp = p.dp, .pp = p.pp};
}

// Where the rank computes ([Note: a run on a device]): the device's default stream.
Stream run_stream(const Config& c) { return Stream{c.train.device, nullptr, c.train.precision}; }

// The device backend of a run on a device, its attention kernels chosen (train.attention_backend),
// or an InputError naming the config key and the fix.
DeviceBackend& run_backend(const Config& c) {
  DeviceBackend* backend = nullptr;
  try {
    backend = &cuda_backend();
  } catch (const Error& e) {
    throw InputError(fmt::format("{}: train.device = \"cuda\", but {}; set train.device = \"cpu\" to train on the "
                                 "CPU",
                                 c.source, e.what()));
  }
  try {
    backend->set_attention(c.train.attention_backend);
  } catch (const Error& e) {
    throw InputError(fmt::format("{}: train.attention_backend = \"cudnn\": {}", c.source, e.what()));
  }
  return *backend;
}

// The communicators ([Note: a run on a device]): MPI's, or NCCL's for a GPU's memory.
ProcessGroups process_groups(const Config& c, const Comm& world) {
  if (c.train.device == Device::cpu || run_backend(c).host_addressable()) return ProcessGroups(world, parallel_dims(c));
#ifdef MEGATRAIN_HAS_CUDA
  return nccl_process_groups(world, parallel_dims(c));
#else
  throw Error(
      "train.device = \"cuda\" on a GPU backend in a build without NCCL (reconfigure with -DMEGATRAIN_CUDA=ON)");
#endif
}

// Model chunk c of pipeline rank s is virtual stage c·pp + s.
std::vector<StageRange> chunk_ranges(const Config& c, int stage) {
  std::vector<StageRange> out;
  for (int chunk = 0; chunk < c.parallel.virtual_stages; ++chunk)
    out.push_back(virtual_stage_range(c, chunk * c.parallel.pp + stage));
  return out;
}

// Where each chunk's units start in the rank's unit list, then the total: chunk k has units
// [out[k], out[k + 1]).
std::vector<int> chunk_unit_bounds(const ParamLayout& layout, const std::vector<StageRange>& ranges) {
  std::vector<int> out{0};
  for (const StageRange& r : ranges) out.push_back(out.back() + static_cast<int>(gpt_param_units(layout, r).size()));
  return out;
}

// This rank's optimizer group `k` (trainer/optim_groups.h: 0 the dense parameters, 1 the experts').
OptimGroupSpec group_spec(const Config& c, const ParamLayout& layout, const std::vector<StageRange>& ranges, size_t k) {
  return optim_group_specs(c, layout, ranges)[k];
}

}  // namespace

RankRun::Experts::Experts(const ParamLayout& layout, const OptimGroupSpec& g, const Comm& edp, const AdamWOptions& a)
    : begin(g.begin), chunk_units(g.chunk_units), zero(g.units, edp, g.zero, g.breaks, g.order),
      optimizer(layout, a, zero.optimizer_range().shifted(begin), zero.optimizer_padded(), g.zero.stream) {}

StageRange virtual_stage_range(const Config& c, int vs) {
  const std::vector<int>& given = c.parallel.pipeline_layers;
  const int stages = c.parallel.pp * c.parallel.virtual_stages;
  const auto layers = [&](int k) { return given.empty() ? c.model.n_layers / stages : given[static_cast<size_t>(k)]; };
  int first = 0;
  for (int k = 0; k < vs; ++k) first += layers(k);
  return {first, layers(vs), vs == 0, vs + 1 == stages};
}

RankRun::RankRun(const Config& c, const Comm& world_comm)
    : cfg(c), stream(run_stream(c)), groups(process_groups(c, world_comm)),
      dp_comm(groups.dp()), tp_comm(groups.tp()), pp_comm(groups.pp()), world(world_comm), dp_rank(dp_comm.rank()),
      dp(dp_comm.size()), data(c, dp_rank, dp), ranges(chunk_ranges(c, pp_comm.rank())),
      steps(pipeline_schedule(c.parallel.pipeline_schedule, pp_comm.rank(),
                              PipeShape{pp_comm.size(), data.train().micro_batches_per_step(), c.parallel.virtual_stages})),
      layout(gpt_param_layout(c.model, TpCoord{tp_comm.rank(), tp_comm.size()}, c.parallel.sequence_parallel, ranges,
                              EpCoord{groups.ep().rank(), groups.ep().size()})),
      chunk_units(chunk_unit_bounds(layout, ranges)),
      stored_layout(gpt_param_layout(c.model)),
      zero(group_spec(c, layout, ranges, 0).units, dp_comm, group_spec(c, layout, ranges, 0).zero,
           group_spec(c, layout, ranges, 0).breaks, group_spec(c, layout, ranges, 0).order),
      optimizer(layout, adamw_options(c), zero.optimizer_range(), zero.optimizer_padded(), stream),
      grad_nan_(zero, gpt_param_units(layout, ranges), zero.buckets(), stream),
      split_backward_(splits_backward(steps)),
      tp_shared_(layout, tp_comm, stream),
      inputs_(static_cast<size_t>(c.train.micro_batch_size) * c.train.seq_len),
      targets_(inputs_.size()) {
  if (on_device()) {
    const FlatRange held = zero.held_params_range(), opt = optimizer.range();
    host_state_ = std::make_unique<HostState>();
    host_state_->params.resize(static_cast<size_t>(held.size()));
    host_state_->exp_avg.resize(static_cast<size_t>(opt.size()));
    host_state_->exp_avg_sq.resize(static_cast<size_t>(opt.size()));
    init_params_range(layout, host_state_->params.data(), held, c.model, c.train.seed);
  } else {
    init_params_range(layout, zero.held_params(), zero.held_params_range(), c.model, c.train.seed);
  }
  if (!moe_expert_units(layout, ranges).empty()) {
    experts = std::make_unique<Experts>(layout, group_spec(c, layout, ranges, 1), groups.edp(), adamw_options(c));
    const FlatRange held = experts->zero.held_params_range().shifted(experts->begin);
    float* params = experts->zero.held_params();
    if (on_device()) {
      const FlatRange opt = experts->optimizer.range();
      host_state_->expert_params.resize(static_cast<size_t>(held.size()));
      host_state_->expert_exp_avg.resize(static_cast<size_t>(opt.size()));
      host_state_->expert_exp_avg_sq.resize(static_cast<size_t>(opt.size()));
      params = host_state_->expert_params.data();
    }
    init_params_range(layout, params, held, c.model, c.train.seed);
  }
  params_written();
  const TpOptions tp_options{c.parallel.sequence_parallel, c.parallel.overlap_tp_comm};
  const int64_t rows = int64_t{c.train.micro_batch_size} * c.train.seq_len;
  std::vector<int> slots;
  for (size_t k = 0; k < ranges.size(); ++k) {
    Chunk ch;
    ch.units = std::make_unique<UnitSlice>(grad_nan_, chunk_units[k]);
    slots.push_back(peak_held(steps, static_cast<int>(k)));
    const StageOptions options{slots.back(), split_backward_, c.train.recompute, c.train.recompute_layers,
                               c.train.precision, c.train.device};
    StageExperts stage_experts;
    if (experts) {
      ch.expert_units = std::make_unique<UnitSlice>(experts->zero, experts->chunk_units[k]);
      stage_experts = {ch.expert_units.get(), groups.ep()};
    }
    ch.stage = std::make_unique<Stage>(c.model, c.train.micro_batch_size, c.train.seq_len, layout, ranges[k], options,
                                       *ch.units, TensorParallel(tp_comm, tp_options, rows, c.model.d_model),
                                       stage_experts);
    chunks_.push_back(std::move(ch));
  }
  for (int n : slots) peak_held_all_ += n;
  pipeline_ = std::make_unique<PipelineExecutor>(pp_comm, chunks_[0].stage->output(0).numel(), slots, stream);
  const bool embedding = ranges.front().embedding, head = ranges.back().head;
  if (c.model.tie_embeddings && pp_comm.size() > 1) {
    Comm group = pp_comm.split(embedding || head ? 0 : 1, pp_comm.rank(), "embedding");
    if (embedding || head) {
      embedding_comm_.emplace(std::move(group));
      const size_t i = layout.index_of("embed.wte");
      embedding_range_ = {layout.offset(i), layout.offset(i) + layout.local_shape(i).numel()};
      zero.hold(embedding_range_);  // summed over the group before the data-parallel reduction
    }
  }
}

Tensor RankRun::forward(int chunk, int slot, int micro, Tensor input) {
  const int B = cfg.train.micro_batch_size, G = cfg.train.global_batch_size;
  ForwardOptions opt;
  Stage& stage = *chunks_[static_cast<size_t>(chunk)].stage;
  if (stage.range().embedding || stage.range().head) {
    if (evaluating_) {
      data.valid()->load(eval_batch_, micro, inputs_.data(), targets_.data());
    } else {
      data.train().load(batch_, micro, inputs_.data(), targets_.data());
    }
  }
  if (!evaluating_) {
    opt.grad = LossGrad::in_place;
    opt.dloss_scale = static_cast<float>(loss_scale_ / static_cast<double>(tokens_per_step()));
    opt.dropout = true;
    opt.dropout_seed = cfg.train.seed;
    opt.first_sample = static_cast<uint64_t>(batch_) * G + static_cast<uint64_t>(dp_rank) * (G / dp) +
                       static_cast<uint64_t>(micro) * B;
  }
  loss_sum_ += stage.forward(slot, MicroBatch{inputs_.data(), targets_.data(), opt}, input);
  return stage.output(slot);
}

bool RankRun::chunk_has_experts(int chunk) const {
  const auto k = static_cast<size_t>(chunk);
  return experts && experts->chunk_units[k] < experts->chunk_units[k + 1];
}

void RankRun::gradients_begin(int chunk) {
  const auto k = static_cast<size_t>(chunk);
  const bool last = --chunks_[k].backwards_left == 0;
  zero.micro_batch_begin(last, chunk_units[k], chunk_units[k + 1]);
  if (chunk_has_experts(chunk))
    experts->zero.micro_batch_begin(last, experts->chunk_units[k], experts->chunk_units[k + 1]);
}

void RankRun::gradients_end(int chunk) {
  zero.micro_batch_end();
  if (chunk_has_experts(chunk)) experts->zero.micro_batch_end();
}

Tensor RankRun::backward(int chunk, int slot, Tensor dout) {
  Stage& stage = *chunks_[static_cast<size_t>(chunk)].stage;
  if (split_backward_) return stage.backward_input(slot, dout);  // ZeRO's hooks bracket weight()
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

double RankRun::mean_over_replicas(double sum, int micro) const {
  if (pp_comm.size() > 1) pp_comm.all_reduce(&sum, 1).wait();  // only the last stage's is not 0
  if (dp > 1) dp_comm.all_reduce(&sum, 1).wait();
  return sum / (micro * dp);
}

void RankRun::optimizer_step(float lr, double norm, float unscale) {
  // Before the update, whose pass rounds the router biases (which AdamW leaves alone) into the 16-bit
  // copy with the rest; step_end then hands the updated values to every rank.
  update_router_biases();
  optimizer.step(zero.optimizer_params(), zero.optimizer_grads(), lr, norm, unscale, zero.optimizer_params16());
  zero.step_end();
  if (!experts) return;
  experts->optimizer.step(experts->zero.optimizer_params(), experts->zero.optimizer_grads(), lr, norm, unscale,
                          experts->zero.optimizer_params16());
  experts->zero.step_end();
}

void RankRun::set_step_count(int64_t t) {
  optimizer.set_step_count(t);
  if (experts) experts->optimizer.set_step_count(t);
}

size_t RankRun::activation_bytes() const {
  size_t bytes = 0;
  for (const Chunk& ch : chunks_) bytes += ch.stage->activation_bytes();
  return bytes;
}

MemoryMetrics RankRun::memory() const {
  const ZeroMemory z = zero.memory();
  MemoryMetrics m;
  m.params = z.params;
  m.master_params = z.master_params;
  m.grads = z.grads;
  m.optimizer = optimizer.state_bytes();
  m.activations = static_cast<int64_t>(activation_bytes());
  m.comm_buffers = z.comm_buffers;
  if (experts) {
    const ZeroMemory e = experts->zero.memory();
    m.params += e.params, m.master_params += e.master_params, m.grads += e.grads;
    m.optimizer += experts->optimizer.state_bytes();
    m.comm_buffers += e.comm_buffers;
  }
  m.gemm_scratch = matmul_scratch_bytes(stream);
  m.peak_rss = peak_rss_bytes();
  if (on_device()) m.device_peak = cuda_backend().memory_stats().peak_allocated;
  return m;
}

double RankRun::forward_backward(int64_t batch, double loss_scale) {
  batch_ = batch;
  loss_scale_ = loss_scale;
  loss_sum_ = 0.0;
  for (Chunk& ch : chunks_) {
    ch.backwards_left = data.train().micro_batches_per_step();
    ch.stage->reset_step_tokens();
  }
  zero.step_begin();
  if (experts) experts->zero.step_begin();
  pipeline_->run(steps, *this);
  return loss_sum_;
}

double RankRun::train_step(int64_t batch, double loss_scale) {
  const double loss_sum = forward_backward(batch, loss_scale);
  // The gradients of values held twice: a tied embedding's two copies (first and last stage)
  // summed over the embedding group before their bucket's data-parallel reduction (optim/zero_state.h
  // [Note: held bucket]), so both stages reduce and update the same values at any ZeRO stage;
  // then partial ones summed over their tensor-parallel sharers.
  zero.reduce_held([&](float* g) { embedding_comm_->all_reduce(g, embedding_range_.size()).wait(); });
  tp_shared_.reduce_partial_grads(zero.optimizer_grads(), zero.optimizer_range());
  return mean_over_replicas(loss_sum, data.train().micro_batches_per_step());
}

double RankRun::grad_norm() {
  std::vector<GradPart> parts{
      GradPart(owned_grads(stream, layout, zero.optimizer_grads(), zero.optimizer_range()), {zero.partitions()})};
  if (experts) {  // each ep rank holds other experts: their squares are summed over ep too
    const FlatRange er = experts->zero.optimizer_range().shifted(experts->begin);
    const Comm& ep = groups.ep();
    parts.emplace_back(owned_grads(stream, layout, experts->zero.optimizer_grads(), er),
                       std::vector<const Comm*>{experts->zero.partitions(), ep.size() > 1 ? &ep : nullptr});
  }
  // Each pipeline stage holds its own tensors.
  return megatrain::grad_norm(stream, parts, {tp_comm.size() > 1 ? &tp_comm : nullptr,
                                              pp_comm.size() > 1 ? &pp_comm : nullptr});
}

RankRun::Overflow RankRun::first_overflow(bool loss_nonfinite) {
  bool reduced_bad = !all_finite(stream, zero.optimizer_grads_tensor());
  bool local_bad = zero.local_nonfinite();
  if (experts) {
    reduced_bad = !all_finite(stream, experts->zero.optimizer_grads_tensor()) || reduced_bad;
    local_bad = local_bad || experts->zero.local_nonfinite();
  }
  // One all-reduce (max) of a key that ranks the causes: own loss, own gradients, reduced gradients,
  // each from the lowest rank.
  const int64_t w = world.size(), r = world.rank();
  const int64_t cause = loss_nonfinite ? 3 : local_bad ? 2 : reduced_bad ? 1 : 0;
  int64_t key = cause == 0 ? 0 : cause * w + (w - 1 - r);
  if (cfg.parallel.max_staleness == 0) {
    world.all_reduce(&key, 1, ReduceOp::max).wait();
  } else {  // [Note: stale-synchronous step]: reduced when queued; reduced gradients are alike everywhere
    key = std::max(stale_key_, reduced_bad ? w + (w - 1) : int64_t{0});
  }
  if (key == 0) return {};
  static constexpr const char* kWhere[] = {"", "reduced grad", "grad", "loss"};
  return {static_cast<int>(w - 1 - key % w), kWhere[key / w]};
}

double RankRun::evaluate() {
  const int micro = data.valid()->micro_batches_per_step();
  evaluating_ = true;
  loss_sum_ = 0.0;
  for (eval_batch_ = 0; eval_batch_ < cfg.train.eval_steps; ++eval_batch_) pipeline_->run_forward(micro, *this);
  evaluating_ = false;
  return mean_over_replicas(loss_sum_, static_cast<int>(cfg.train.eval_steps) * micro);
}

}  // namespace megatrain
