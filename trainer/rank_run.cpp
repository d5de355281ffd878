#include "trainer/rank_run.h"

#include <algorithm>

#include "config/optim_groups.h"
#include "kernels/cuda/backend.h"
#include "kernels/flat_buffer.h"
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

// The optimizer groups of config/optim_groups.h: the dense parameters over dp, the experts over the
// expert-data-parallel group (and summed over ep in the global norm: each ep rank holds others) —
// each with the cp ranks, which hold the same parameters (dp_cp, edp_cp).
std::deque<OptimGroup> make_optim_groups(const Config& c, const ProcessGroups& groups, const ParamLayout& layout,
                                    const std::vector<StageRange>& ranges, const Stream& stream) {
  std::deque<OptimGroup> out;
  const Comm* ep = groups.ep().size() > 1 ? &groups.ep() : nullptr;
  for (const OptimGroupSpec& g : optim_group_specs(c, layout, ranges))
    out.emplace_back(g, layout, g.experts ? groups.edp_cp() : groups.dp_cp(), g.experts ? ep : nullptr, adamw_options(c),
                     stream);
  return out;
}

}  // namespace

RankRun::RankRun(const Config& c, const Comm& world_comm, ParamsAt params)
    : cfg(c), stream(run_stream(c)), groups(process_groups(c, world_comm)),
      world(world_comm), data(c, groups.dp().rank(), groups.dp().size()), ranges(chunk_ranges(c, groups.pp().rank())),
      steps(pipeline_schedule(c.parallel.pipeline_schedule, groups.pp().rank(),
                              PipeShape{groups.pp().size(), data.train().micro_batches_per_step(),
                                        c.parallel.virtual_stages})),
      layout(gpt_param_layout(c.model, TpCoord{groups.tp().rank(), groups.tp().size()}, c.parallel.sequence_parallel,
                              ranges, EpCoord{groups.ep().rank(), groups.ep().size()})),
      stored_layout(gpt_param_layout(c.model)), optim_(make_optim_groups(c, groups, layout, ranges, stream)),
      grad_nan_(optim_.front().zero(), optim_.front().spec().units, optim_.front().zero().buckets(), stream),
      split_backward_(splits_backward(steps)), tp_shared_(layout, groups.tp(), stream),
      feed_{std::vector<int32_t>(static_cast<size_t>(c.train.micro_batch_size) * c.train.seq_len),
            std::vector<int32_t>(static_cast<size_t>(c.train.micro_batch_size) * c.train.seq_len)} {
  if (params == ParamsAt::seed) initialise();
  const TpOptions tp_options{c.parallel.sequence_parallel, c.parallel.overlap_tp_comm};
  const CpSplit split{groups.cp().size(), groups.cp().rank(), c.train.seq_len};
  const int T = split.local_len();
  const int64_t rows = int64_t{c.train.micro_batch_size} * T;
  if (split.cp > 1) {
    feed_.local_inputs.resize(static_cast<size_t>(rows));
    feed_.local_targets.resize(static_cast<size_t>(rows));
  }
  std::vector<int> slots;
  for (size_t k = 0; k < ranges.size(); ++k) {
    Chunk ch;
    StageExperts stage_experts;
    for (OptimGroup& g : optim_) {
      UnitState& state = g.spec().experts ? static_cast<UnitState&>(g.zero()) : static_cast<UnitState&>(grad_nan_);
      ch.units.push_back(std::make_unique<UnitSlice>(state, g.spec().chunk_units[k]));
      if (g.spec().experts) stage_experts = {ch.units.back().get(), groups.ep()};
    }
    slots.push_back(peak_held(steps, static_cast<int>(k)));
    const StageOptions options{slots.back(), split_backward_, c.train.recompute, c.train.recompute_layers,
                               c.train.precision, c.train.device, c.train.bf16_activations};
    TensorParallel tp(groups.tp(), tp_options, rows, c.model.d_model);
    StageContext context{groups.cp(), c.parallel.cp_comm, split};
    ch.stage = std::make_unique<Stage>(c.model, c.train.micro_batch_size, T, layout, ranges[k], options,
                                       *ch.units.front(), std::move(tp), stage_experts, std::move(context));
    chunks_.push_back(std::move(ch));
  }
  for (int n : slots) peak_held_all_ += n;
  pipeline_ = std::make_unique<PipelineExecutor>(groups.pp(), chunks_[0].stage->output(0).numel(), slots, stream);
  const bool ends = ranges.front().embedding || ranges.back().head;
  if (c.model.tie_embeddings && groups.pp().size() > 1) {
    Comm group = groups.pp().split(ends ? 0 : 1, groups.pp().rank(), "embedding");
    if (ends) tied_.emplace(std::move(group));
  }
}

Tensor RankRun::forward(int chunk, int slot, int micro, Tensor input) {
  const int B = cfg.train.micro_batch_size, G = cfg.train.global_batch_size, dp = groups.dp().size();
  ForwardOptions opt;
  Stage& stage = *chunks_[static_cast<size_t>(chunk)].stage;
  Feed& f = feed_;
  if (stage.range().embedding || stage.range().head) {
    if (f.evaluating) {
      data.valid()->load(f.eval_batch, micro, f.inputs.data(), f.targets.data());
    } else {
      data.train().load(f.batch, micro, f.inputs.data(), f.targets.data());
      if (stage.range().head && !cfg.log.samples_file.empty() && groups.tp().rank() == 0 && groups.cp().rank() == 0)
        digest_samples(f.batch, micro);
    }
  }
  if (!f.evaluating) {
    opt.grad = LossGrad::in_place;
    opt.dloss_scale = static_cast<float>(f.loss_scale / static_cast<double>(tokens_per_step()));
    opt.dropout = true;
    opt.dropout_seed = cfg.train.seed;
    opt.first_sample = static_cast<uint64_t>(f.batch) * G + static_cast<uint64_t>(groups.dp().rank()) * (G / dp) +
                       static_cast<uint64_t>(micro) * B;
  }
  const int32_t *tokens = f.inputs.data(), *targets = f.targets.data();
  if (groups.cp().size() > 1) {  // this rank's rows of the sequences
    if (stage.range().embedding || stage.range().head) {
      const CpSplit split{groups.cp().size(), groups.cp().rank(), cfg.train.seq_len};
      split.take_local(f.inputs.data(), f.local_inputs.data(), B);
      split.take_local(f.targets.data(), f.local_targets.data(), B);
    }
    tokens = f.local_inputs.data(), targets = f.local_targets.data();
  }
  f.loss_sum += stage.forward(slot, MicroBatch{tokens, targets, opt}, input);
  return stage.output(slot);
}

void RankRun::digest_samples(int64_t batch, int micro) {
  const BatchLoader& loader = data.train();
  const int64_t S = loader.seq_len();
  SampleDigest& d = feed_.samples[batch];
  for (int b = 0; b < loader.micro_batch_size(); ++b) {
    const int32_t* row = feed_.inputs.data() + b * S;
    d.add(loader.sample_index(batch, micro, b), row, S, feed_.targets[static_cast<size_t>(b * S + S - 1)]);
  }
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
  const Comm &pp = groups.pp(), &dp = groups.dp_cp();  // each cp rank's loss is over its share of the tokens
  if (pp.size() > 1) pp.all_reduce(&sum, 1).wait();  // only the last stage's is not 0
  if (dp.size() > 1) dp.all_reduce(&sum, 1).wait();
  return sum / (micro * dp.size());
}

double RankRun::forward_backward(int64_t batch, double loss_scale) {
  feed_.batch = batch;
  feed_.loss_scale = loss_scale;
  feed_.loss_sum = 0.0;
  for (Chunk& ch : chunks_) {
    ch.backwards_left = data.train().micro_batches_per_step();
    ch.stage->moe_stats().reset_step_tokens();
  }
  for (OptimGroup& g : optim_) g.step_begin();
  pipeline_->run(steps, *this);
  return feed_.loss_sum;
}

double RankRun::train_step(int64_t batch, double loss_scale) {
  const double loss_sum = forward_backward(batch, loss_scale);
  for (OptimGroup& g : optim_) g.finish(tied_ ? &*tied_ : nullptr, tp_shared_);
  return mean_over_replicas(loss_sum, data.train().micro_batches_per_step());
}

double RankRun::stale_step(int64_t step, int64_t data_skip, int64_t horizon) {
  const int s = cfg.parallel.max_staleness;
  MT_CHECK(s > 0 && step < horizon, "stale_step({}) needs max_staleness > 0 and a horizon after it ({})", step,
           horizon);
  if (stale_.queued.empty()) stale_.next = step;
  const int w = world.size(), r = world.rank();
  for (; stale_.next <= std::min(step + s, horizon - 1); ++stale_.next) {
    StaleScalars& q = stale_.queued.emplace_back();
    q.loss = forward_backward(stale_.next + data_skip, 1.0);
    bool own_bad = false;
    for (OptimGroup& g : optim_) {
      g.zero().defer_reduction();
      own_bad = own_bad || g.zero().local_nonfinite();
    }
    q.key = overflow_key(false, own_bad, false, r, w);
    if (groups.dp_cp().size() > 1) q.loss_work = groups.dp_cp().all_reduce(&q.loss, 1);
    q.key_work = world.all_reduce(&q.key, 1, ReduceOp::max);
  }
  for (OptimGroup& g : optim_) g.zero().retire_reduction();
  StaleScalars& q = stale_.queued.front();
  q.loss_work.wait();
  q.key_work.wait();
  const double loss = q.loss / (data.train().micro_batches_per_step() * groups.dp_cp().size());
  stale_.key = q.key;
  stale_.queued.pop_front();
  return loss;
}

void RankRun::stale_discard() {
  for (OptimGroup& g : optim_) g.zero().discard_reductions();
  for (const StaleScalars& q : stale_.queued) {
    q.loss_work.wait();
    q.key_work.wait();
  }
  stale_.queued.clear();
}

Overflow RankRun::first_overflow(bool loss_nonfinite) {
  bool reduced_bad = false, own_bad = false;
  for (const OptimGroup& g : optim_) {
    reduced_bad = g.reduced_nonfinite() || reduced_bad;
    own_bad = own_bad || g.zero().local_nonfinite();
  }
  int64_t key = overflow_key(loss_nonfinite, own_bad, reduced_bad, world.rank(), world.size());
  if (cfg.parallel.max_staleness == 0) {
    world.all_reduce(&key, 1, ReduceOp::max).wait();
  } else {  // [Note: stale-synchronous step]: reduced when queued; reduced gradients are alike everywhere
    key = std::max(stale_.key, overflow_key(false, false, reduced_bad, 0, world.size()));
  }
  return overflow_of(key, world.size());
}

double RankRun::grad_norm() {
  std::vector<GradPart> parts;
  for (const OptimGroup& g : optim_) parts.push_back(g.grad_part());
  const Comm &tp = groups.tp(), &pp = groups.pp();  // each pipeline stage holds its own tensors
  return megatrain::grad_norm(stream, parts, {tp.size() > 1 ? &tp : nullptr, pp.size() > 1 ? &pp : nullptr});
}

void RankRun::optimizer_step(float lr, double norm, float unscale) {
  const std::vector<StateStep> biases = router_bias_steps();
  for (OptimGroup& g : optim_) g.update(lr, norm, unscale, biases);
}

// Each MoE block's aux-free bias step (model/moe.h moe_update_bias) from its loads this step, summed
// over dp (tp ranks route the same rows).
std::vector<StateStep> RankRun::router_bias_steps() {
  const MoeConfig& moe = cfg.model.moe;
  std::vector<StateStep> out;
  if (moe.aux_free_bias <= 0.0f) return out;
  for (Chunk& ch : chunks_)
    for (const MoeLayerStats& m : ch.stage->moe_stats().layers()) {
      std::vector<int64_t> load = m.step_tokens;
      if (groups.dp_cp().size() > 1) groups.dp_cp().all_reduce(load.data(), moe.n_experts).wait();
      const size_t i = layout.index_of("layers." + std::to_string(m.layer) + ".moe.router.bias");
      StateStep& s = out.emplace_back(StateStep{{layout.offset(i), layout.offset(i) + moe.n_experts},
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
  for (OptimGroup& g : optim_) g.initialise(cfg.model, cfg.train.seed);
}

void RankRun::state_written() {
  for (OptimGroup& g : optim_) g.state_written();
}

FlatSlice RankRun::held_params_host(size_t group) {
  const HostSlice s = optim_.at(group).held_params_host();
  return {s.data, s.range.begin, s.range.end};
}

CheckpointTensors RankRun::checkpoint_tensors() {
  CheckpointTensors t{&layout, &stored_layout, {}};
  const auto slice = [](const HostSlice& s) { return FlatSlice{s.data, s.range.begin, s.range.end}; };
  for (OptimGroup& g : optim_) {
    const HostState h = g.host_state();
    t.pieces.push_back({slice(h.params), slice(h.exp_avg), slice(h.exp_avg_sq), h.partition.begin, h.partition.end,
                        g.spec().begin});
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
  m.gemm_scratch = matmul_scratch_bytes(stream);
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
  std::vector<MoeLayerStats> all;
  for (int l = 0; l < cfg.model.n_layers; ++l)
    if (cfg.model.moe.is_moe_layer(l))
      all.push_back({l, std::vector<int64_t>(static_cast<size_t>(cfg.model.moe.n_experts)), {}});
  if (all.empty()) return all;
  // Every value of every layer in one sum over the world; tp ranks route the same rows, so only
  // tp rank 0 of each stage adds its own.
  const size_t E = static_cast<size_t>(cfg.model.moe.n_experts), per = E + 5;
  std::vector<double> sums(all.size() * per, 0.0);
  for (Chunk& ch : chunks_) {
    for (const MoeLayerStats& m : ch.stage->moe_stats().layers()) {
      size_t i = 0;
      while (all[i].layer != m.layer) ++i;
      double* v = sums.data() + i * per;
      if (groups.tp().rank() == 0) {
        for (size_t e = 0; e < E; ++e) v[e] = static_cast<double>(m.tokens[e]);
        v[E] = static_cast<double>(m.dropped), v[E + 1] = static_cast<double>(m.assignments);
        v[E + 2] = m.aux, v[E + 3] = m.z, v[E + 4] = static_cast<double>(m.micro_batches);
      }
    }
    ch.stage->moe_stats().reset();
  }
  world.all_reduce(sums.data(), static_cast<int64_t>(sums.size())).wait();
  for (size_t i = 0; i < all.size(); ++i) {
    const double* v = sums.data() + i * per;
    for (size_t e = 0; e < E; ++e) all[i].tokens[e] = static_cast<int64_t>(v[e]);
    all[i].dropped = static_cast<int64_t>(v[E]), all[i].assignments = static_cast<int64_t>(v[E + 1]);
    all[i].aux = v[E + 2], all[i].z = v[E + 3], all[i].micro_batches = static_cast<int64_t>(v[E + 4]);
  }
  return all;
}

double RankRun::evaluate() {
  const int micro = data.valid()->micro_batches_per_step();
  feed_.evaluating = true;
  feed_.loss_sum = 0.0;
  for (feed_.eval_batch = 0; feed_.eval_batch < cfg.train.eval_steps; ++feed_.eval_batch)
    pipeline_->run_forward(micro, *this);
  feed_.evaluating = false;
  return mean_over_replicas(feed_.loss_sum, static_cast<int>(cfg.train.eval_steps) * micro);
}

void RankRun::reset_comm_stats() const {
  for (const Comm* c : {&groups.dp_cp(), &groups.tp(), &groups.pp(), &groups.ep(), &groups.edp_cp(), &groups.cp(), &world})
    c->reset_stats();
  if (cfg.parallel.zero_hpz_partition_size > 1) optim_.front().zero().hpz_comm().reset_stats();
}

StepComm RankRun::comm_stats() const {
  StepComm c{groups.dp_cp().stats(), groups.tp().stats(), groups.pp().stats(), groups.ep().stats(), world.stats(),
             groups.cp().stats()};
  c.dp += groups.edp_cp().stats();
  if (cfg.parallel.zero_hpz_partition_size > 1) {
    const CommStats h = optim_.front().zero().hpz_comm().stats();
    c.dp += h;
    c.hpz_bytes = h.bytes_moved;
  }
  return c;
}

}  // namespace megatrain
