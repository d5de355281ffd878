#include "parallel/zero.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "kernels/ops.h"

namespace megatrain {
namespace {

// Float32 values into the 16-bit tensor `out`, or the 16-bit tensor `in` widened into float32
// (kernels/ops.h convert), on the stream's device.
void to_half(const Stream& s, Tensor out, const float* in) {
  convert(s, out, Tensor(const_cast<float*>(in), out.shape).on(s.device));
}
void from_half(const Stream& s, float* out, Tensor in) { convert(s, Tensor(out, in.shape).on(s.device), in); }

Bf16* bf16_data(const HalfBuffer& b) { return reinterpret_cast<Bf16*>(b.data()); }

}  // namespace

ZeroState::ZeroState(std::vector<FlatRange> units, const Comm& dp, const ZeroOptions& opt,
                     const std::vector<int>& breaks)
    : units_(std::move(units)), dp_(dp), opt_(opt), total_(units_.empty() ? 0 : units_.back().end),
      shard_(flat_shard_size(total_, dp.size())), part_(flat_partition(total_, dp.rank(), dp.size())),
      buckets_(units_, opt.bucket_floats, breaks), hpz_(dp) {
  MT_CHECK(opt.stage >= 0 && opt.stage <= 3, "ZeRO stage {} (0..3)", opt.stage);
  if (opt.compression != GradCompression::none) {
    MT_CHECK(opt.stage == 0 && opt.grad_reduce == Precision::fp32,
             "gradient compression needs ZeRO stage 0 and float32 reduction (stage {}, {})", opt.stage,
             precision_name(opt.grad_reduce));
    compressor_ = make_grad_compressor(opt.compression, dp, opt.matrices, opt.powersgd_rank, opt.seed);
  }
  MT_CHECK(opt.max_staleness >= 0 && (opt.max_staleness == 0 || (opt.stage == 0 && opt.grad_reduce == Precision::fp32 &&
                                                                  opt.compression == GradCompression::none)),
           "max_staleness {} needs ZeRO stage 0, float32 reduction and no compression", opt.max_staleness);
  MT_CHECK(opt.stream.device == Device::cpu ||
               (!opt.quantized_weights && opt.compression == GradCompression::none && !opt.quantized_gradients &&
                opt.hpz_partition_size <= 1 && opt.max_staleness == 0),
           "ZeRO on a device reduces gradients exactly, without compression, ZeRO++ or staleness ([Note: ZeRO on a "
           "device])");
  part_counts_ = counts_of(FlatRange{0, total_});
  for (const FlatRange& u : units_) {
    unit_counts_.push_back(counts_of(u));
    max_unit_ = std::max(max_unit_, u.size());
  }
  for (int b = 0; b < buckets_.size(); ++b) {
    Bucket st;
    st.counts = counts_of(buckets_[b].range);
    st.mine = flat_intersect(buckets_[b].range, part_);
    bucket_state_.push_back(std::move(st));
  }
  const int64_t held = opt.stage == 3 ? shard_ : total_;
  if (sixteen_bit()) {
    masters_ = FlatBuffer(optimizer_padded(), opt.stream);
    params16_ = HalfBuffer(held, opt.params, opt.stream);
  } else if (opt.quantized_weights) {  // [Note: ZeRO++] qwZ
    masters_ = FlatBuffer(optimizer_padded());
    if (opt.stage < 3) params_ = FlatBuffer(total_);
  } else {
    params_ = FlatBuffer(held, opt.stream);
  }
  zeropp_init();
  grads_ = FlatBuffer(opt.stage >= 2 ? shard_ : total_, opt.stream);
  if (opt.stage >= 1) received_ = FlatBuffer(shard_, opt.stream);
  for (int k = 0; k < opt.max_staleness; ++k) spare_.emplace_back(total_);
}

std::vector<int64_t> ZeroState::counts_of(FlatRange r) const {
  std::vector<int64_t> counts;
  for (int k = 0; k < dp_.size(); ++k) counts.push_back(flat_intersect(r, flat_partition(total_, k, dp_.size())).size());
  return counts;
}

float* ZeroState::optimizer_params() {
  if (masters_apart() || opt_.stage == 3) return held_params();
  return params_.data() + optimizer_range().begin;
}

FlatRange ZeroState::held_params_range() const {
  if (masters_apart()) return optimizer_range();
  return opt_.stage == 3 ? part_ : FlatRange{0, total_};
}

Tensor ZeroState::optimizer_params16() const {
  if (!sixteen_bit()) return Tensor{};
  const FlatRange r = optimizer_range();
  return params16_.part(opt_.stage == 3 ? 0 : r.begin, r.size());
}

void ZeroState::params_written() {
  secondary_valid_.assign(secondary_valid_.size(), false);
  if (opt_.quantized_weights) return publish_quantized();
  if (!sixteen_bit()) return;
  to_half(opt_.stream, optimizer_params16(), masters_.data());
  gather_params16();
}

void ZeroState::gather_params16() {
  if (opt_.stage != 1 && opt_.stage != 2) return;
  dp_.all_gather(params16_.data(), params16_.data() + optimizer_range().begin, part_counts_).wait();
}

// Stage 1 keeps the full accumulated gradients in grads_ and receives its reduced partition into
// received_; the other stages reduce into grads_ (full at 0, the shard at 2/3).
const float* ZeroState::optimizer_grads() const { return opt_.stage == 1 ? received_.data() : grads_.data(); }

void ZeroState::step_begin() {
  if (grads_.size() == 0) {  // [Note: bounded staleness]: the last step's buffer is in flight
    MT_CHECK(!spare_.empty(), "ZeRO: {} reductions in flight, more than max_staleness = {}", deferred_.size(),
             opt_.max_staleness);
    grads_ = std::move(spare_.back());
    spare_.pop_back();
  }
  zero_fill(opt_.stream, grads_.part(0, grads_.size()));
  local_nonfinite_ = false;
}

void ZeroState::hold(FlatRange r) {
  held_ = -1;
  for (int b = 0; b < buckets_.size() && held_ < 0; ++b)
    if (flat_intersect(buckets_[b].range, r).size() == r.size()) held_ = b;
  MT_CHECK(held_ >= 0 && r.size() > 0, "ZeRO: no gradient bucket holds [{}, {})", r.begin, r.end);
  held_range_ = r;
}

float* ZeroState::held_grads() {
  const FlatRange bucket = buckets_[held_].range;
  if (opt_.stage < 2) return grads_.data() + held_range_.begin;
  Bucket& st = bucket_state_[static_cast<size_t>(held_)];
  if (st.buffer < 0) st.buffer = grad_buffer_take(bucket.size());  // nothing written this step (no units)
  return grad_pool_[static_cast<size_t>(st.buffer)].data() + (held_range_.begin - bucket.begin);
}

void ZeroState::micro_batch_begin(bool last, int first_unit, int end_unit) {
  last_micro_ = last;
  // Buckets are numbered from the highest units down, so the range's are consecutive.
  const int last_unit = end_unit < 0 ? static_cast<int>(units_.size()) - 1 : end_unit - 1;
  first_bucket_ = buckets_.bucket_of(last_unit);
  end_bucket_ = buckets_.bucket_of(first_unit) + 1;
  MT_CHECK(buckets_[first_bucket_].last_unit == last_unit && buckets_[end_bucket_ - 1].first_unit == first_unit,
           "ZeRO: units [{}, {}] do not start and end buckets", first_unit, last_unit);
  for (int b = first_bucket_; b < end_bucket_; ++b) {
    Bucket& st = bucket_state_[static_cast<size_t>(b)];
    st.pending = buckets_[b].num_units();
    st.issued = false;
  }
}

// Stages 0/1 reduce the accumulated gradients once, on the last micro-batch; 2/3 every micro-batch.
void ZeroState::bucket_issue(int b) {
  Bucket& st = bucket_state_[static_cast<size_t>(b)];
  const FlatRange r = buckets_[b].range;
  float* out = st.mine.size() > 0 ? received_.data() + (st.mine.begin - part_.begin) : received_.data();
  const Tensor grad = opt_.stage < 2 ? grads_.part(r.begin, r.size())
                                     : grad_pool_[static_cast<size_t>(st.buffer)].part(0, r.size());
  const float* g = grad.f32();
  if (!local_nonfinite_) local_nonfinite_ = !all_finite(opt_.stream, grad);
  if (compressor_) {
    compressor_->reduce(grads_.data() + r.begin, r);
    st.issued = true;
    return;
  }
  if (opt_.quantized_gradients) {
    st.work = qgz_issue(st, g);
    st.issued = true;
    return;
  }
  if (opt_.grad_reduce == Precision::bf16) {
    st.send = HalfBuffer(r.size(), Precision::bf16, opt_.stream);
    to_half(opt_.stream, st.send.part(0, r.size()), g);
    if (opt_.stage > 0) st.recv = HalfBuffer(st.mine.size(), Precision::bf16, opt_.stream);
    reduce16_bytes_ += 2 * (st.send.size() + st.recv.size());
    reduce16_peak_ = std::max(reduce16_peak_, reduce16_bytes_);
    st.work = opt_.stage == 0 ? dp_.all_reduce(bf16_data(st.send), r.size())
                              : dp_.reduce_scatter(bf16_data(st.recv), bf16_data(st.send), st.counts);
    st.issued = true;
    return;
  }
  switch (opt_.stage) {
    case 0: st.work = dp_.all_reduce(grads_.data() + r.begin, r.size()); break;
    case 1: st.work = dp_.reduce_scatter(out, grads_.data() + r.begin, st.counts); break;
    default: st.work = dp_.reduce_scatter(out, grad_pool_[static_cast<size_t>(st.buffer)].data(), st.counts); break;
  }
  st.issued = true;
}

void ZeroState::micro_batch_end() {
  const bool reduce = opt_.stage >= 2 || last_micro_;
  if (!reduce) return;
  for (int b = first_bucket_; b < end_bucket_; ++b) {
    Bucket& st = bucket_state_[static_cast<size_t>(b)];
    MT_CHECK(st.pending == 0, "bucket {} still waits for {} units after backward", b, st.pending);
    if (!st.issued && b != held_) bucket_issue(b);
  }
  if (opt_.max_staleness > 0) return;  // defer_reduction() queues them
  for (int b = first_bucket_; b < end_bucket_; ++b)
    if (b != held_) bucket_complete(b);
}

void ZeroState::defer_reduction() {
  MT_CHECK(opt_.max_staleness > 0, "ZeRO: defer_reduction() needs max_staleness > 0");
  Deferred d{std::exchange(grads_, FlatBuffer()), {}};
  for (Bucket& st : bucket_state_) {
    MT_CHECK(st.issued, "ZeRO: defer_reduction() before every bucket was issued");
    d.works.push_back(std::exchange(st.work, Work{}));
  }
  deferred_.push_back(std::move(d));
}

void ZeroState::retire_reduction() {
  MT_CHECK(!deferred_.empty(), "ZeRO: retire_reduction() with no reduction in flight");
  for (const Work& w : deferred_.front().works) w.wait();
  if (grads_.size() > 0) spare_.push_back(std::exchange(grads_, FlatBuffer()));
  grads_ = std::move(deferred_.front().grads);
  deferred_.pop_front();
}

void ZeroState::discard_reductions() {
  for (Deferred& d : deferred_) {
    for (const Work& w : d.works) w.wait();
    spare_.push_back(std::move(d.grads));
  }
  deferred_.clear();
}

// Waits for bucket b's reduction; at stages 2/3 adds its reduced partition to the gradient shard
// ([Note: grad accumulation] over micro-batches happens here) and releases its working buffer.
void ZeroState::bucket_complete(int b) {
  Bucket& st = bucket_state_[static_cast<size_t>(b)];
  st.work.wait();
  st.work = Work{};
  if (!st.qsend.empty()) qgz_complete(st, received_.data() + (st.mine.size() > 0 ? st.mine.begin - part_.begin : 0));
  if (st.send.size() > 0) {  // [Note: bf16 reduction]: widen the result into where float32 would be
    const FlatRange r = buckets_[b].range;
    if (opt_.stage == 0)
      from_half(opt_.stream, grads_.data() + r.begin, st.send.part(0, r.size()));
    else if (st.mine.size() > 0)
      from_half(opt_.stream, received_.data() + (st.mine.begin - part_.begin), st.recv.part(0, st.mine.size()));
    reduce16_bytes_ -= 2 * (st.send.size() + st.recv.size());
    st.send = HalfBuffer();
    st.recv = HalfBuffer();
  }
  if (opt_.stage < 2 || st.buffer < 0) return;
  if (st.mine.size() > 0) {
    const int64_t off = st.mine.begin - part_.begin;
    const Tensor acc = grads_.part(off, st.mine.size());
    add_forward(opt_.stream, acc, acc, received_.part(off, st.mine.size()));
  }
  grad_free_.push_back(st.buffer);
  st.buffer = -1;
}

// A zeroed working buffer of at least n floats for a bucket's gradients (stages 2/3): a free one
// if one is large enough; else a new one while there are fewer than kGradBuffers (so up to that
// many reductions overlap backward); else the buffer of the oldest bucket whose reduction is in
// flight, once that completes; else (every buffer held by a bucket backward is still producing,
// such as the tied embedding's, held from the head to the end of backward) a new one.
int ZeroState::grad_buffer_take(int64_t n) {
  constexpr size_t kGradBuffers = 4;
  for (;;) {
    for (size_t k = 0; k < grad_free_.size(); ++k) {
      const int id = grad_free_[k];
      if (grad_pool_[static_cast<size_t>(id)].size() < n) continue;
      grad_free_.erase(grad_free_.begin() + static_cast<std::ptrdiff_t>(k));
      zero_fill(opt_.stream, grad_pool_[static_cast<size_t>(id)].part(0, n));
      return id;
    }
    if (grad_pool_.size() < kGradBuffers) break;
    int oldest = -1;
    for (int b = 0; b < buckets_.size() && oldest < 0; ++b) {
      const Bucket& st = bucket_state_[static_cast<size_t>(b)];
      if (st.issued && st.buffer >= 0) oldest = b;
    }
    if (oldest < 0) break;
    bucket_complete(oldest);
  }
  grad_pool_.emplace_back(n, opt_.stream);
  return static_cast<int>(grad_pool_.size()) - 1;
}

double ZeroState::sum_over_partitions(double local) const {
  if (opt_.stage >= 1) dp_.all_reduce(&local, 1).wait();
  return local;
}

Tensor ZeroState::optimizer_grads_tensor() const {
  return Tensor(const_cast<float*>(optimizer_grads()), Shape{optimizer_range().size()}).on(opt_.stream.device);
}

double ZeroState::grad_norm() {
  return std::sqrt(sum_over_partitions(sum_squares(opt_.stream, optimizer_grads_tensor())));
}

void ZeroState::step_end() {
  secondary_valid_.assign(secondary_valid_.size(), false);
  if (opt_.quantized_weights) return publish_quantized();
  if (sixteen_bit()) return gather_params16();  // the optimizer wrote optimizer_params16()
  if (opt_.stage != 1 && opt_.stage != 2) return;
  float* p = params_.data();
  dp_.all_gather(p, p + part_.begin, part_counts_).wait();
}

void ZeroState::begin_pass(std::span<const int> param_order) {
  order_.assign(param_order.begin(), param_order.end());
  order_pos_ = 0;
}

ZeroState::GatherSlot& ZeroState::gather_start(int unit) {
  for (GatherSlot& s : slots_)
    if (s.unit == unit) return s;
  GatherSlot* slot = nullptr;
  for (GatherSlot& s : slots_)
    if (s.unit < 0) {
      slot = &s;
      break;
    }
  if (!slot) {
    slots_.push_back(GatherSlot{-1, false, false, Work{}, FlatBuffer(max_unit_, opt_.stream), {}, {}, false});
    slot = &slots_.back();
    if (sixteen_bit() && opt_.stage == 3) slot->packed = HalfBuffer(max_unit_, opt_.params, opt_.stream);
    if (opt_.quantized_weights && opt_.stage == 3) slot->quantized.resize(static_cast<size_t>(unit_quant_most_));
  }
  slot->unit = unit;
  slot->widened = false;
  slot->keep_secondary = false;
  if (opt_.stage < 3) return *slot;  // 16-bit below stage 3: nothing to gather
  if (hpz() && secondary_valid_[static_cast<size_t>(unit)]) {  // [Note: ZeRO++] hpZ: within the group
    slot->widened = true;
    slot->work = hpz_.all_gather(slot->buffer.data(), secondary_.data() + secondary_at_[static_cast<size_t>(unit)],
                                 secondary_counts_[static_cast<size_t>(unit)]);
    return *slot;
  }
  slot->keep_secondary = hpz();
  if (opt_.quantized_weights) {
    slot->work = gather_quantized(*slot, unit);
    return *slot;
  }
  const FlatRange mine = flat_intersect(units_[static_cast<size_t>(unit)], part_);
  const int64_t at = mine.size() > 0 ? mine.begin - part_.begin : 0;
  const std::vector<int64_t>& counts = unit_counts_[static_cast<size_t>(unit)];
  slot->work = sixteen_bit() ? dp_.all_gather(slot->packed.data(), params16_.data() + at, counts)
                             : dp_.all_gather(slot->buffer.data(), params_.data() + at, counts);
  return *slot;
}

float* ZeroState::unit_params(int unit) {
  const FlatRange u = units_[static_cast<size_t>(unit)];
  if (opt_.stage < 3 && !sixteen_bit()) return params_.data() + u.begin;
  GatherSlot* slot = &gather_start(unit);
  slot->acquired = true;
  while (order_pos_ < order_.size() && order_[order_pos_] != unit) ++order_pos_;
  if (opt_.stage == 3 && order_pos_ + 1 < order_.size()) {
    const int next = order_[order_pos_ + 1];
    const size_t index = static_cast<size_t>(slot - slots_.data());
    gather_start(next);  // may grow slots_: find ours again by index
    slot = &slots_[index];
  }
  slot->work.wait();
  if (!slot->widened) {
    if (opt_.quantized_weights) {
      unpack_quantized(*slot, unit);
    } else if (sixteen_bit()) {
      from_half(opt_.stream, slot->buffer.data(),
                opt_.stage == 3 ? slot->packed.part(0, u.size()) : params16_.part(u.begin, u.size()));
    }
    slot->widened = true;
  }
  if (slot->keep_secondary) keep_secondary(*slot, unit);
  return slot->buffer.data();
}

void ZeroState::unit_params_done(int unit) {
  if (opt_.stage < 3 && !sixteen_bit()) return;
  for (GatherSlot& s : slots_)
    if (s.unit == unit && s.acquired) {
      s.unit = -1;
      s.acquired = false;
      return;
    }
  MT_CHECK(false, "unit_params_done({}) without unit_params", unit);
}

float* ZeroState::unit_grads(int unit) {
  const FlatRange u = units_[static_cast<size_t>(unit)];
  if (opt_.stage < 2) return grads_.data() + u.begin;
  const int b = buckets_.bucket_of(unit);
  Bucket& st = bucket_state_[static_cast<size_t>(b)];
  if (st.buffer < 0) st.buffer = grad_buffer_take(buckets_[b].range.size());
  return grad_pool_[static_cast<size_t>(st.buffer)].data() + (u.begin - buckets_[b].range.begin);
}

void ZeroState::unit_grads_done(int unit) {
  const int b = buckets_.bucket_of(unit);
  Bucket& st = bucket_state_[static_cast<size_t>(b)];
  MT_CHECK(st.pending > 0, "unit_grads_done({}) twice in one micro-batch", unit);
  if (--st.pending == 0 && opt_.overlap && (opt_.stage >= 2 || last_micro_) && b != held_) bucket_issue(b);
}

ZeroMemory ZeroState::memory() const {
  const int64_t f = sizeof(float), h = sizeof(uint16_t);
  ZeroMemory m;
  m.params = params_.size() * f + params16_.size() * h + secondary_.size() * f;
  // qwZ: at stage 3 the packed shard is the parameters; at stages 1–2 the gather's buffer.
  (opt_.stage == 3 ? m.params : m.comm_buffers) += static_cast<int64_t>(quantized_.size());
  m.master_params = masters_.size() * f;
  m.grads = grads_.size() * f;
  m.comm_buffers += received_.size() * f + reduce16_peak_ + (compressor_ ? compressor_->state_bytes() : 0) +
                    opt_.max_staleness * total_ * f;  // [Note: bounded staleness]
  for (const FlatBuffer& b : grad_pool_) m.comm_buffers += b.size() * f;
  for (const GatherSlot& s : slots_)
    m.comm_buffers += s.buffer.size() * f + s.packed.size() * h +
                      static_cast<int64_t>(s.quantized.size());
  return m;
}

}  // namespace megatrain
