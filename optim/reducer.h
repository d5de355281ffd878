// Reducer: how a ZeRO state reduces one gradient bucket over the data-parallel ranks — a collective
// (all-reduce in place at stage 0; reduce-scatter into this rank's part at stages 1–3) and the
// wire format it travels in — chosen once by make_zero_parts (optim/zero_parts.h):
//   FloatWire (reducer.cpp)       float32
//   Bf16Wire (reducer.cpp)        rounded to bfloat16 and widened back ([Note: bf16 reduction])
//   QgzWire (reduce_qgz.cpp)      ZeRO++ qgZ: int8 blocks by all-to-all, summed by the owner
//   CompressedWire (reducer.cpp)  a GradCompressor (optim/compress/grad_compression.h), blocking
// Invariant: after complete(b, out), `out` holds this rank's result of bucket b: the sum over the
// ranks of their gradients (compressed: its estimate), of the whole bucket or of this rank's part.
#pragma once
#include <cstdint>
#include <memory>

#include "kernels/tensor.h"
#include "optim/zero_plan.h"
#include "parallel/comm.h"

namespace megatrain {

class Collective {
 public:
  virtual ~Collective() = default;
  // Floats of bucket b's result on this rank: the bucket (all-reduce) or its part (reduce-scatter).
  virtual int64_t result_size(int b) const = 0;
  virtual bool in_place() const = 0;  // the result replaces the bucket's values
  // Reduces bucket b's values `in` into `out` (result_size(b) values; in place: out == in).
  virtual Work reduce(float* out, float* in, int b) const = 0;
  virtual Work reduce(Bf16* out, Bf16* in, int b) const = 0;
  // The communicator whose ranks hold the other parts of the reduced gradients; nullptr: whole.
  virtual const Comm* partitions() const = 0;
};
std::unique_ptr<Collective> make_all_reduce(const ZeroPlan& plan, const Comm& dp);
std::unique_ptr<Collective> make_reduce_scatter(const ZeroPlan& plan, const Comm& dp);

class Reducer {
 public:
  virtual ~Reducer() = default;
  // Starts reducing bucket b's gradients (`grads`: this rank's, the bucket's range) into `out`
  // (the collective's result: `grads` itself in place, or this rank's part).
  virtual Work issue(int b, Tensor grads, float* out) = 0;
  // Once the Work is done: what remains to make `out` the result (widen, sum the parts).
  virtual void complete(int b, float* out) { (void)b, (void)out; }
  virtual const Collective& collective() const = 0;
  virtual int64_t exchange_peak() const { return 0; }  // bytes of working copies in flight, at their peak
  virtual int64_t state_bytes() const { return 0; }    // kept across steps (a compressor's)
};
std::unique_ptr<Reducer> make_float_wire(std::unique_ptr<Collective> c);
std::unique_ptr<Reducer> make_bf16_wire(const ZeroPlan& plan, std::unique_ptr<Collective> c);
std::unique_ptr<Reducer> make_qgz_wire(const ZeroPlan& plan, const Comm& dp, std::unique_ptr<Collective> c);
std::unique_ptr<Reducer> make_compressed_wire(const ZeroPlan& plan, const Comm& dp, std::unique_ptr<Collective> c);

}  // namespace megatrain
