// ZeroState: data-parallel training state with ZeRO sharding (Rajbhandari et al. 2020), as the
// UnitState a model stage reads its parameters and writes its gradients through.
//
// p data-parallel ranks; T = floats of the flat layout; rank r owns the partition
// flat_partition(T, r, p) and every shard buffer is padded to s = ceil(T / p) floats.
//   stage 0: full parameters and gradients on every rank; each gradient bucket is all-reduced.
//   stage 1: full parameters and gradients; each bucket is reduce-scattered, so a rank receives the
//            reduced gradients of its partition; it updates its partition (optimizer state is
//            sharded by the caller: AdamW over optimizer_range()) and the updated partitions are
//            all-gathered into the full parameters.
//   stage 2: as 1, but a rank keeps only its gradient partition: gradients are produced into
//            bucket-sized working buffers, reduce-scattered after every micro-batch's backward,
//            accumulated into the rank's gradient shard, and the buffers released.
//   stage 3: as 2, and parameters are sharded too: each unit's parameters are all-gathered into a
//            unit-sized buffer just before the model uses it (forward, and again in backward), the
//            next unit's gather is issued while the current one computes, and the buffer is freed
//            after use.
// [Note: 16-bit parameters] With ZeroOptions::params = bf16 or fp16 (mixed precision) the optimizer
// updates float32 *masters* — all T at stage 0, the rank's partition at stages 1–3 — and compute
// reads a 16-bit copy derived from them (rounded, never stored in checkpoints): the full copy at
// stages 0–2, the partition at stage 3. The optimizer rounds the masters it updates into
// optimizer_params16() in the update's own pass (model/optimizer.h), and step_end() all-gathers
// the 16-bit values at stages 1–2 (at 3, per unit as the model reads them: half the bytes of
// float32); params_written() rounds all the masters itself (initialisation, a load). A unit's
// parameters reach the model widened into a unit-sized float32 buffer, since the kernels read
// float32 (the values are exactly the 16-bit ones; the GEMMs round their operands to 16 bits).
// [Note: bf16 reduction] With ZeroOptions::grad_reduce = bf16 a bucket's float32 gradients are
// rounded to bfloat16 and reduced as Bf16 (parallel/comm.h: each addition in float32, rounded),
// half the bytes; the result is widened back and accumulated in float32 as usual. The working
// bf16 copies live from a bucket's issue to its completion (counted in comm_buffers at their peak).
// [Note: ZeRO++] (Wang et al. 2023; parallel/zero_pp.cpp) three switches, each usable alone:
//   qwZ (quantized_weights, stages 1–3, float32 compute): the optimizer updates float32 masters of
//     the partition, as at 16 bits; what is all-gathered is their int8 block quantization
//     (parallel/block_quant.h, blocks of quant_block values starting at each rank's part of the
//     gathered range: the partition at stages 1–2, each unit's part at stage 3), and every rank,
//     the owner included, computes with the dequantized values, so replicas stay identical.
//     Stage 3 keeps the quantized shard (packed bytes per unit) instead of a float32 one.
//   qgZ (quantized_gradients, stages 1–3, float32 reduction): a bucket's reduce-scatter becomes an
//     all-to-all of int8 blocks: each rank quantizes the part of the bucket each rank owns (its
//     own part too, so every contribution is treated alike), and the owner dequantizes the p parts
//     it receives and sums them in float32 in rank order — deterministic, and within Σ sₖ/2 of the
//     exact sum per element (sₖ: the scale of contributor k's block). The packed runs travel as
//     4-byte words ([Note: packed int8 layout]).
//   hpZ (hpz_partition_size = k > 1, stage 3): the dp ranks form groups of k consecutive ranks (one
//     host each; the constructor checks the host names). The first gather of a unit after the
//     parameters change (the step's first forward) runs over all dp ranks as usual; each rank then
//     keeps a secondary shard — its 1/k slice of the unit's float32 values as the model reads
//     them — and every later gather of that unit in the step (backward, later micro-batches) is an
//     all-gather of those slices within the group. The values are the same, so results are
//     bitwise those of plain stage 3; the secondary shards are counted in params.
// [Note: bucket overlap] with overlap on, a bucket's reduction is issued the moment backward
// finishes its last unit (on the last micro-batch for stages 0/1, on every micro-batch for 2/3),
// so it runs while backward continues on the lower units; with overlap off, all buckets are
// issued after backward. Either way the reductions are waited for in micro_batch_end(), or, at
// stages 2/3, earlier when backward needs a working buffer and the oldest one in flight must be
// recycled (so working memory stays near the buckets backward is producing).
//
// [Note: bounded staleness] With ZeroOptions::max_staleness = s > 0 (stage 0, float32 reduction, no
// compression: the stale-synchronous parallelism of Ho et al. 2013) a step's bucket all-reduces are
// issued as usual but not waited for: defer_reduction() queues them with the gradient buffer they
// reduce in place, and the next step accumulates into another buffer. retire_reduction() waits for
// the oldest queued reduction and makes its buffer optimizer_grads(), so the caller applies step
// t − s's reduced gradients after computing step t's, and a rank is held up by a slower peer only
// when that peer is more than s steps behind. Every replica applies the same sequence of summed
// gradients, so parameters stay identical. The s extra buffers are allocated up front and counted
// in comm_buffers (s·T floats); the MPI backend's progress thread moves the reductions on while
// the rank computes (parallel/comm_mpi.cpp [Note: progress]). At s = 0 none of this runs.
// [Note: ZeRO on a device] With ZeroOptions::stream on a CUDA device (train.device = "cuda") every
// buffer above is device memory (FlatBuffer on the stream), the pointers handed out are device
// pointers, and the communicator moves device buffers (NCCL; parallel/comm_nccl.h). The zeroing,
// the Inf/NaN scan of each bucket, the stage-2/3 accumulation and the 16-bit rounding and widening
// (16-bit parameters, bf16 reduction) are ops on the stream. Compression, ZeRO++ and bounded
// staleness keep host-side steps and are refused there.
// Protocol per step: step_begin(); for each micro-batch m: micro_batch_begin(m is last), forward,
// backward, micro_batch_end(); grad_norm(); the optimizer over optimizer_range(); step_end().
// Invariant: after micro_batch_end() of the last micro-batch, optimizer_grads() holds the sum over
// ranks and micro-batches of the gradients of optimizer_range(), and after step_end() every rank's
// parameters (full, or gathered per unit) are the updated ones.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/device.h"
#include "kernels/flat_buffer.h"
#include "parallel/comm.h"
#include "parallel/grad_buckets.h"
#include "parallel/grad_compression.h"
#include "parallel/unit_state.h"

namespace megatrain {

struct ZeroOptions {
  int stage = 0;                 // 0 | 1 | 2 | 3
  int64_t bucket_floats = 1 << 22;
  bool overlap = true;           // [Note: bucket overlap]
  Precision params = Precision::fp32;  // what compute reads ([Note: 16-bit parameters])
  // The gradient reduction's element type: fp32, or bf16 ([Note: bf16 reduction]).
  Precision grad_reduce = Precision::fp32;
  // Stage 0 with fp32 reduction only: each bucket reduced by a compressor instead of an all-reduce
  // (parallel/grad_compression.h), blocking (no overlap with backward); its state (error feedback,
  // PowerSGD's Q) is counted in comm_buffers.
  GradCompression compression = GradCompression::none;
  int powersgd_rank = 4;
  std::vector<MatrixSpan> matrices = {};  // the layout's 2-D tensors
  uint64_t seed = 0;
  int max_staleness = 0;  // [Note: bounded staleness]
  // [Note: ZeRO++]
  bool quantized_weights = false;
  bool quantized_gradients = false;
  int hpz_partition_size = 1;
  int64_t quant_block = 256;
  // [Note: ZeRO on a device] Where the buffers live and the scans and sums run.
  Stream stream = Stream::cpu();
};

// Bytes one rank holds. Model state (params, grads; the optimizer's moments are AdamW's) follows
// the ZeRO paper's per-parameter table for fp32 training; comm_buffers are the working buffers
// (reduce-scatter receive shard, bucket and gather buffers) at their peak.
// params: what compute reads (16-bit at bf16/fp16); master_params: the float32 masters when they
// are separate ([Note: 16-bit parameters]).
struct ZeroMemory {
  int64_t params = 0, master_params = 0, grads = 0, comm_buffers = 0;
};

class ZeroState final : public UnitState {
 public:
  // units: the model's units (contiguous from 0); dp: the data-parallel communicator (a handle,
  // copied); breaks: the first units of the model chunks after the first (interleaved pipelines).
  ZeroState(std::vector<FlatRange> units, const Comm& dp, const ZeroOptions& opt, const std::vector<int>& breaks = {});
  ZeroState(const ZeroState&) = delete;
  ZeroState& operator=(const ZeroState&) = delete;

  int stage() const { return opt_.stage; }
  int64_t total() const { return total_; }
  FlatRange partition() const { return part_; }
  int64_t shard_floats() const { return shard_; }
  const GradBuckets& buckets() const { return buckets_; }

  // The range the optimizer updates: [0, T) at stage 0, the partition otherwise; its moments are
  // padded to optimizer_padded() floats.
  FlatRange optimizer_range() const { return opt_.stage == 0 ? FlatRange{0, total_} : part_; }
  int64_t optimizer_padded() const { return opt_.stage == 0 ? total_ : shard_; }
  // Parameters (the masters at 16-bit) and reduced gradients of optimizer_range() (element 0 = its
  // first flat element).
  float* optimizer_params();
  const float* optimizer_grads() const;
  float* optimizer_grads() { return const_cast<float*>(std::as_const(*this).optimizer_grads()); }
  // optimizer_grads() as a tensor of optimizer_range().size() floats on the state's device.
  Tensor optimizer_grads_tensor() const;
  // What this rank holds of the float32 parameters (element 0 = the range's first flat element):
  // [0, T) at stages 0–2 and the partition at stage 3; at 16-bit, the masters (optimizer_range()).
  // After writing them (initialisation, a checkpoint), call params_written().
  FlatRange held_params_range() const;
  float* held_params() { return masters_apart() ? masters_.data() : params_.data(); }
  void params_written();

  void step_begin();
  // Whether this rank's own gradients held an Inf or NaN before any data-parallel reduction this
  // step (each bucket is scanned as it is issued): the rank a non-finite value came from.
  bool local_nonfinite() const { return local_nonfinite_; }
  // A micro-batch's backward over units [first_unit, end_unit) (a model chunk; −1: to the last):
  // only the buckets of those units are reduced by it. `last`: the chunk's last backward of the step.
  void micro_batch_begin(bool last, int first_unit = 0, int end_unit = -1);
  void micro_batch_end();
  // [Note: held bucket] The bucket holding flat range r is not reduced during the step: its
  // gradients accumulate over the micro-batches (in its working buffer at stages 2/3) until
  // reduce_held(), called after the last micro-batch, hands them to `before` (r's gradients, in
  // place) and then reduces the bucket as usual. A tied embedding uses it to sum its two stages'
  // gradients before the data-parallel reduction, whatever the ZeRO stage.
  void hold(FlatRange r);
  template <class F>
  void reduce_held(F&& before) {
    if (held_ < 0) return;
    before(held_grads());
    bucket_issue(held_);
    bucket_complete(held_);
  }
  // A statistic of optimizer_grads() (such as Σ g²) summed over the data-parallel ranks that
  // partition them (stages ≥ 1); at stage 0 every rank holds it all and it is returned as is.
  double sum_over_partitions(double local) const;
  // Global L2 norm of the step's summed gradient (without tensor parallelism).
  double grad_norm();
  // 16-bit parameters: the copy of optimizer_range() that the optimizer writes with its update
  // ([Note: 16-bit parameters]), a view on the state's device; empty otherwise (float32, qwZ).
  Tensor optimizer_params16() const;
  // After the optimizer's update: every rank's parameters become the updated ones (at 16-bit, the
  // optimizer must have written optimizer_params16()).
  void step_end();
  // [Note: bounded staleness]: after the last micro_batch_end(), queue the step's reductions in
  // flight; retire_reduction() waits for the oldest and makes it optimizer_grads();
  // discard_reductions() waits for every queued one and drops them.
  void defer_reduction();
  int reductions_in_flight() const { return static_cast<int>(deferred_.size()); }
  void retire_reduction();
  void discard_reductions();

  ZeroMemory memory() const;
  // hpZ's group communicator ([Note: ZeRO++]): this rank's group of hpz_partition_size dp ranks
  // (a communicator of one rank when hpZ is off).
  const Comm& hpz_comm() const { return hpz_; }

  void begin_pass(std::span<const int> param_order) override;
  float* unit_params(int unit) override;
  void unit_params_done(int unit) override;
  float* unit_grads(int unit) override;
  void unit_grads_done(int unit) override;

 private:
  // A bucket's reduction in the current micro-batch.
  struct Bucket {
    int pending = 0;        // units of the bucket whose gradients are not final yet
    bool issued = false;
    Work work;
    int buffer = -1;        // stages 2/3: index into grad_pool_
    std::vector<int64_t> counts;
    FlatRange mine;         // its intersection with this rank's partition
    HalfBuffer send, recv;  // [Note: bf16 reduction]: the rounded bucket, the reduced part
    std::vector<float> qsend, qrecv;  // qgZ: packed runs as words, to each rank and from each rank
    std::vector<int64_t> qsend_counts, qrecv_counts;  // qgZ: their sizes in words
  };
  // A unit's parameters as the model reads them: gathered (stage 3) and/or widened from 16 bits.
  struct GatherSlot {
    int unit = -1;          // -1 = free
    bool acquired = false;
    bool widened = false;   // 16-bit: buffer holds the unit's values
    Work work;
    FlatBuffer buffer;
    HalfBuffer packed;             // 16-bit at stage 3: the gathered bits
    std::vector<uint8_t> quantized;  // qwZ at stage 3: the gathered packed runs
    bool keep_secondary = false;     // hpZ: a gather over all dp ranks, whose slice is to be kept
  };
  bool sixteen_bit() const { return opt_.params != Precision::fp32; }
  bool masters_apart() const { return sixteen_bit() || opt_.quantized_weights; }
  // [Note: ZeRO++] (parallel/zero_pp.cpp)
  void zeropp_init();
  void publish_quantized();                   // qwZ: quantize the masters and gather (stages 1–2)
  Work gather_quantized(GatherSlot& slot, int unit);  // qwZ at stage 3: issue a unit's gather
  void unpack_quantized(GatherSlot& slot, int unit);  // ... and dequantize it into slot.buffer
  Work qgz_issue(Bucket& st, const float* g);
  void qgz_complete(Bucket& st, float* out);
  bool hpz() const { return opt_.hpz_partition_size > 1; }
  void keep_secondary(GatherSlot& slot, int unit);
  void gather_params16();  // [Note: 16-bit parameters]: all-gather the partitions' copies (stages 1–2)
  float* held_grads();  // the held range's gradients
  void bucket_issue(int b);
  void bucket_complete(int b);
  int grad_buffer_take(int64_t n);
  GatherSlot& gather_start(int unit);
  std::vector<int64_t> counts_of(FlatRange r) const;  // |r ∩ partition of each rank|, in rank order

  std::vector<FlatRange> units_;
  Comm dp_;
  ZeroOptions opt_;
  int64_t total_, shard_, max_unit_ = 0;
  FlatRange part_;
  GradBuckets buckets_;
  std::vector<int64_t> part_counts_;
  std::vector<std::vector<int64_t>> unit_counts_;
  std::vector<Bucket> bucket_state_;
  bool last_micro_ = true;
  int first_bucket_ = 0, end_bucket_ = 0;  // the buckets of the current backward's units
  int held_ = -1;           // [Note: held bucket]
  FlatRange held_range_;
  // Prefetch (stage 3): the current pass's order of unit_params calls and the position in it.
  std::vector<int> order_;
  size_t order_pos_ = 0;
  // Persistent state.
  FlatBuffer params_;      // float32: stages 0–2 full (T), stage 3 the shard (s); empty at 16-bit
  FlatBuffer masters_;     // 16-bit: float32 masters of optimizer_range(), padded to optimizer_padded()
  HalfBuffer params16_;    // 16-bit: stages 0–2 full (T), stage 3 the shard (s)
  FlatBuffer grads_;       // stages 0–1: full (T); stages 2–3: the shard (s)
  FlatBuffer received_;    // stages ≥ 1: reduce-scatter destination, this rank's partition (s)
  // Working buffers, reused; they only grow.
  std::vector<FlatBuffer> grad_pool_;  // stages 2/3: each sized for the bucket it was made for
  std::vector<int> grad_free_;
  std::vector<GatherSlot> slots_;      // stage 3 or 16-bit: unit-sized
  bool local_nonfinite_ = false;
  // The working copies of [Note: bf16 reduction] and of qgZ while a reduction is in flight.
  int64_t reduce16_bytes_ = 0, reduce16_peak_ = 0;
  // qwZ: the packed runs of every rank's partition (stages 1–2, gathered in place); at stage 3 this
  // rank's packed run of each unit's part, from unit_quant_at_[u].
  std::vector<uint8_t> quantized_;
  std::vector<int64_t> part_quant_, unit_quant_at_;  // stages 1–2: packed bytes of each rank's part
  std::vector<std::vector<int64_t>> unit_quant_;     // stage 3: packed bytes of each rank's part of each unit
  int64_t unit_quant_most_ = 0;                      // stage 3: the largest unit's gathered bytes
  // hpZ: the group, this rank's slice of each unit (from secondary_at_[u]), each group rank's slice
  // sizes per unit, and whether the slice holds the current parameters.
  Comm hpz_;
  FlatBuffer secondary_;
  std::vector<int64_t> secondary_at_;
  std::vector<std::vector<int64_t>> secondary_counts_;
  std::vector<bool> secondary_valid_;
  std::unique_ptr<GradCompressor> compressor_;  // ZeroOptions::compression
  // [Note: bounded staleness]: the queued reductions, oldest first, and the free gradient buffers.
  struct Deferred {
    FlatBuffer grads;
    std::vector<Work> works;
  };
  std::deque<Deferred> deferred_;
  std::vector<FlatBuffer> spare_;
};

}  // namespace megatrain
