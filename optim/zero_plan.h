// ZeroPlan: what ZeRO (Rajbhandari et al. 2020) holds on one data-parallel rank, as a pure function
// of the units, the rank's place among the dp ranks and the options — no communicator, no memory.
// The runtime (optim/zero_state.h) allocates every buffer from it, and the planner
// (planner/plan_memory.h) asks it for the memory of a layout it never runs.
//
// p data-parallel ranks; T = floats of the flat layout; rank r owns the partition
// flat_partition(T, r, p) and every shard buffer is padded to s = ceil(T / p) floats.
//   stage 0: full parameters and gradients on every rank; each gradient bucket is all-reduced.
//   stage 1: full parameters and gradients; each bucket is reduce-scattered, so a rank receives the
//            reduced gradients of its partition; it updates its partition (the optimizer's state is
//            sharded: AdamW over optimizer_range) and the updated partitions are all-gathered.
//   stage 2: as 1, but a rank keeps only its gradient partition: gradients are produced into
//            bucket-sized working buffers ([Note: gradient pool]), reduce-scattered after every
//            micro-batch's backward, accumulated into the rank's gradient shard, and the buffers
//            released.
//   stage 3: as 2, and parameters are sharded too: each unit's parameters are all-gathered into a
//            unit-sized gather slot just before the model uses it (forward, and again in backward),
//            the next unit's gather is issued while the current one computes, and the slot is freed
//            after use.
// [Note: 16-bit parameters] With ZeroOptions::params = bf16 or fp16 (mixed precision) the optimizer
// updates float32 *masters* — all T at stage 0, the rank's partition at stages 1–3 — and compute
// reads a 16-bit copy derived from them (rounded, never stored in checkpoints): the full copy at
// stages 0–2, the partition at stage 3. The optimizer rounds the masters it updates into
// optimizer_params16() in the update's own pass (optim/adamw.h), and the update's publication
// all-gathers the 16-bit values at stages 1–2 (at 3, per unit as the model reads them: half the
// bytes of float32); params_written() rounds all the masters itself (initialisation, a load). A
// unit's parameters reach the model widened into a unit-sized float32 slot, since the kernels read
// float32 (the values are exactly the 16-bit ones; the GEMMs round their operands to 16 bits).
// [Note: bf16 reduction] With ZeroOptions::grad_reduce = bf16 a bucket's float32 gradients are
// rounded to bfloat16 and reduced as Bf16 (parallel/comm.h: each addition in float32, rounded),
// half the bytes; the result is widened back and accumulated in float32 as usual. The working
// bf16 copies live from a bucket's issue to its completion (counted in comm_buffers at their peak).
// [Note: ZeRO++] (Wang et al. 2023; optim/qwz.cpp, optim/reduce_qgz.cpp, optim/hpz.cpp) three
// switches, each usable alone:
//   qwZ (quantized_weights, stages 1–3, float32 compute): the optimizer updates float32 masters of
//     the partition, as at 16 bits; what is all-gathered is their int8 block quantization
//     (optim/compress/block_quant.h, blocks of quant_block values starting at each rank's part of
//     the gathered range: the partition at stages 1–2, each unit's part at stage 3), and every
//     rank, the owner included, computes with the dequantized values, so replicas stay identical.
//     Stage 3 keeps the quantized shard (packed bytes per unit) instead of a float32 one.
//   qgZ (quantized_gradients, stages 1–3, float32 reduction): a bucket's reduce-scatter becomes an
//     all-to-all of int8 blocks: each rank quantizes the part of the bucket each rank owns (its
//     own part too, so every contribution is treated alike), and the owner dequantizes the p parts
//     it receives and sums them in float32 in rank order — deterministic, and within Σ sₖ/2 of the
//     exact sum per element (sₖ: the scale of contributor k's block). The packed runs travel as
//     4-byte words ([Note: packed int8 layout]).
//   hpZ (hpz_partition_size = k > 1, stage 3): the dp ranks form groups of k consecutive ranks (one
//     host each; checked when the group is made). The first gather of a unit after the parameters
//     change (the step's first forward) runs over all dp ranks as usual; each rank then keeps a
//     secondary shard — its 1/k slice of the unit's float32 values as the model reads them — and
//     every later gather of that unit in the step (backward, later micro-batches) is an all-gather
//     of those slices within the group. The values are the same, so results are bitwise those of
//     plain stage 3; the secondary shards are counted in params.
// [Note: bucket overlap] with overlap on, a bucket's reduction is issued the moment backward
// finishes its last unit (on the last micro-batch for stages 0/1, on every micro-batch for 2/3),
// so it runs while backward continues on the lower units; with overlap off, all buckets are
// issued after backward. Either way the reductions are waited for at the micro-batch's end, or, at
// stages 2/3, earlier when backward needs a working buffer and the oldest one in flight must be
// recycled (so working memory stays near the buckets backward is producing).
// [Note: bounded staleness] With ZeroOptions::max_staleness = s > 0 (stage 0, float32 reduction, no
// compression: the stale-synchronous parallelism of Ho et al. 2013) a step's bucket all-reduces are
// issued as usual but not waited for: they are queued with the gradient buffer they reduce in place
// (optim/staleness.h), and the next step accumulates into another buffer; the caller applies step
// t − s's reduced gradients after computing step t's, so a rank is held up by a slower peer only
// when that peer is more than s steps behind. Every replica applies the same sequence of summed
// gradients, so parameters stay identical. The s extra buffers are allocated up front and counted
// in comm_buffers (s·T floats); the MPI backend's progress thread moves the reductions on while
// the rank computes (parallel/comm_mpi.cpp [Note: progress]). At s = 0 none of this runs.
// [Note: ZeRO on a device] With ZeroOptions::stream on a CUDA device (train.device = "cuda") every
// buffer is device memory, the pointers handed out are device pointers, and the communicator moves
// device buffers (NCCL; parallel/comm_nccl.h). The zeroing, the Inf/NaN scan of each bucket, the
// stage-2/3 accumulation and the 16-bit rounding and widening are ops on the stream. Compression,
// ZeRO++ and bounded staleness keep host-side steps and are refused there.
// Invariant: the plan's buffers are exactly what the runtime allocates, except the working buffers
// whose peak depends on the order a step uses them (the gradient pool, the gather slots, the
// reductions' working copies): the plan gives them from one replay of the backward's unit order.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/device.h"
#include "optim/compress/grad_compression.h"
#include "parallel/flat_range.h"
#include "parallel/grad_buckets.h"

namespace megatrain {

struct ZeroOptions {
  int stage = 0;  // 0 | 1 | 2 | 3
  int64_t bucket_floats = 1 << 22;
  bool overlap = true;                 // [Note: bucket overlap]
  Precision params = Precision::fp32;  // what compute reads ([Note: 16-bit parameters])
  // The gradient reduction's element type: fp32, or bf16 ([Note: bf16 reduction]).
  Precision grad_reduce = Precision::fp32;
  // Stage 0 with fp32 reduction only: each bucket reduced by a compressor instead of an all-reduce
  // (optim/compress/grad_compression.h), blocking (no overlap with backward); its state (error
  // feedback, PowerSGD's Q) is counted in comm_buffers.
  GradCompression compression = GradCompression::none;
  int powersgd_rank = 4;
  std::vector<MatrixSpan> matrices = {};  // the layout's 2-D tensors
  uint64_t seed = 0;
  int max_staleness = 0;  // [Note: bounded staleness]
  // The schedule computes weight gradients after a micro-batch's backward (zero-bubble's weight
  // steps), so a micro-batch's gradients are not complete when its backward ends.
  bool deferred_weight_grads = false;
  // [Note: ZeRO++]
  bool quantized_weights = false;
  bool quantized_gradients = false;
  int hpz_partition_size = 1;
  int64_t quant_block = 256;
  // [Note: ZeRO on a device] Where the buffers live and the scans and sums run.
  Stream stream = Stream::cpu();
};

// The switch a refused combination of ZeroOptions is about.
enum class ZeroSwitch : uint8_t { stage, compression, staleness, device, qwz, qgz, hpz, quant_block, deferred_grads };
struct ZeroProblem {
  ZeroSwitch what;
  std::string message;  // what the switch needs, in ZeroOptions' terms
};
// The one list of which options combine on `dp` data-parallel ranks: every rule a combination
// breaks, in the order above (empty: it is built). The runtime refuses the first; the config's
// validation (config/config_validate.cpp) words each one in config keys.
std::vector<ZeroProblem> zero_options_problems(const ZeroOptions& o, int dp);

// What a step moves over the data-parallel group, by stage: the layout planner's cost model
// (planner/plan_cost.cpp) reads it instead of the stage.
struct ZeroTraffic {
  bool sharded_update = false;        // each rank updates its 1/dp partition (stages 1–3)
  bool grads_reduce_scattered = false;  // into partitions (stages 1–3), or all-reduced whole (stage 0)
  bool grads_per_micro_batch = false;   // each micro-batch's reduced as its backward ends (stages 2–3)
  bool params_gathered_after_update = false;  // the updated partitions all-gathered (stages 1–2)
  int param_gathers_per_micro_batch = 0;      // the forward's and backward's gathers of stage 3's shards
};
ZeroTraffic zero_traffic(const ZeroOptions& o);

// Bytes one rank holds. Model state (params, grads; the optimizer's moments are AdamW's) follows
// the ZeRO paper's per-parameter table for fp32 training; comm_buffers are the working buffers
// (reduce-scatter receive shard, bucket and gather buffers) at their peak.
// params: what compute reads (16-bit at bf16/fp16); master_params: the float32 masters when they
// are separate ([Note: 16-bit parameters]).
struct ZeroMemory {
  int64_t params = 0, master_params = 0, grads = 0, comm_buffers = 0;
};

// The order in which a step's backward asks for and hands back unit gradients, for the replay
// of the working buffers (model/unit_binder.h [Note: unit order]). Per micro-batch, the chunks from the
// last: the head unit (with the tied embedding's, which the head writes first and the embedding's
// backward finishes last), the blocks from the last, then the embedding.
struct UnitOrder {
  struct Chunk {
    int first_unit = 0, last_unit = 0;  // inclusive; a chunk without units is left out
    bool embedding = false, head = false, shares_embedding = false;
  };
  std::vector<Chunk> chunks;
  int micro_batches = 1;
  int held_unit = -1;          // a unit of the [Note: held bucket]; −1: none
  int extra_gather_slots = 0;  // units a pass keeps acquired besides the current one (a tied head)
};

// One buffer of the plan: its element count and element type (packed: bytes of int8 blocks).
enum class ZeroDType : uint8_t { f32, bf16, f16, packed };
struct ZeroBuffer {
  int64_t count = 0;
  ZeroDType dtype = ZeroDType::f32;
  int64_t bytes() const;
};

// The working buffers whose peak depends on the order a step uses them.
struct ZeroWorking {
  int64_t grad_pool_floats = 0;  // [Note: gradient pool]
  int64_t exchange_bytes = 0;    // the reductions' bf16 or qgZ copies in flight, at their peak
  int gather_slots = 0;
  int64_t compressor_bytes = 0;  // the compressor's state (known once it is made)
};

struct ZeroPlan {
  ZeroOptions options;
  std::vector<FlatRange> units;
  int dp = 1, rank = 0;
  int64_t total = 0, shard = 0;  // T, s
  FlatRange partition;           // this rank's
  GradBuckets buckets;
  std::vector<int64_t> part_counts = {};                 // every rank's partition size, in rank order
  std::vector<std::vector<int64_t>> unit_counts = {};    // per unit: |unit ∩ partition of each rank|
  std::vector<std::vector<int64_t>> bucket_counts = {};  // per bucket, the same
  std::vector<FlatRange> bucket_mine = {};               // per bucket: its intersection with the partition
  int64_t max_unit = 0;
  FlatRange optimizer_range = {};  // what the optimizer updates: [0, T) at stage 0, the partition after
  int64_t optimizer_padded = 0;    // the optimizer's moments, padded so every rank holds the same
  FlatRange held_range = {};       // what this rank holds of the float32 parameters (or masters)
  bool partitioned = false;        // the gradients the optimizer reads are one partition of dp's
  // Persistent buffers.
  ZeroBuffer params = {};    // float32 values compute reads: full (stages 0–2), the shard (3)
  ZeroBuffer masters = {};   // float32 masters of optimizer_range (16-bit, qwZ), padded
  ZeroBuffer params16 = {};  // the 16-bit copy: full (0–2), the shard (3)
  // qwZ: every rank's packed partition (1–2, gathered in place), this rank's packed unit parts (3).
  ZeroBuffer quantized = {};
  ZeroBuffer secondary = {};  // hpZ: this rank's slice of every unit
  ZeroBuffer grads = {};      // full (0–1), the shard (2–3)
  ZeroBuffer received = {};   // the reduce-scatter destination, this rank's partition (1–3)
  ZeroBuffer stale = {};      // [Note: bounded staleness]: the s extra gradient buffers, all together
  // A gather slot (unit-sized; stage 3 or 16-bit): its float32 values, and what is gathered into it.
  ZeroBuffer slot = {}, slot16 = {}, slot_packed = {};
  // qwZ's packed bytes: of each rank's partition (1–2); at 3, of each rank's part of each unit and
  // where this rank's part of each unit starts in `quantized`.
  std::vector<int64_t> part_packed = {};
  std::vector<std::vector<int64_t>> unit_packed = {};
  std::vector<int64_t> unit_packed_at = {};
  // hpZ: each group rank's slice of each unit, and where this rank's starts in `secondary`.
  std::vector<std::vector<int64_t>> secondary_counts = {};
  std::vector<int64_t> secondary_at = {};
  ZeroWorking working = {};  // from the replay of the backward's unit order

  ZeroMemory memory() const { return memory(working); }
  ZeroMemory memory(const ZeroWorking& w) const;
};

// units: contiguous from flat element 0; breaks: the first units of chunks after the first
// (GradBuckets); order: the backward's unit order, for the working buffers. Throws on options
// zero_options_problems refuses.
ZeroPlan plan_zero(std::vector<FlatRange> units, int dp, int rank, const ZeroOptions& options,
                   const std::vector<int>& breaks = {}, const UnitOrder& order = {});

}  // namespace megatrain
