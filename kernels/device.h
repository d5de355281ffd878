// Stream: where an op runs. On CPU ops run synchronously on the calling thread (OpenMP inside);
// the CUDA backend gives a Stream its cudaStream_t. Every op takes the stream first.
// Event: a point in a stream's work, to order two streams or to time work between two points.
// This header names no CUDA type (the CUDA half lives in kernels/cuda/stream.cu).
#pragma once
#include <chrono>

#include "kernels/tensor.h"

namespace megatrain {

// What the linear layers' GEMMs (matmul_forward/backward) multiply: float32 values, or their
// bfloat16 or fp16 roundings (kernels/half.h) — products and sums in float32 either way, as
// mixed-precision training does (a product of two 16-bit values is exact in float32).
enum class Precision : uint8_t { fp32, bf16, fp16 };
constexpr DType dtype_of(Precision p) {
  return p == Precision::fp32 ? DType::f32 : p == Precision::bf16 ? DType::bf16 : DType::f16;
}
constexpr const char* precision_name(Precision p) {
  return p == Precision::fp32 ? "fp32" : p == Precision::bf16 ? "bf16" : "fp16";
}

struct Stream {
  Device device = Device::cpu;
  void* handle = nullptr;  // cudaStream_t on CUDA, unused on CPU
  Precision matmul = Precision::fp32;
  static Stream cpu(Precision matmul = Precision::fp32) { return Stream{Device::cpu, nullptr, matmul}; }
};

// record(s) marks the point after everything enqueued on s so far; stream_wait(t, e) makes t run
// nothing enqueued after the call until that point is reached; synchronize() blocks the host until
// it is. On CPU ops are synchronous, so an event is reached the moment it is recorded: waiting
// returns at once, and elapsed_ms is the host time between two records. On CUDA the event owns a
// cudaEvent_t (with timing) created here and destroyed with it. Move-only.
class Event {
 public:
  explicit Event(Device device = Device::cpu);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& s);
  void synchronize() const;
  bool recorded() const { return recorded_; }
  Device device() const { return device_; }
  void* handle() const { return handle_; }  // cudaEvent_t on CUDA, nullptr on CPU

 private:
  friend void stream_wait(const Stream& s, const Event& e);
  friend float elapsed_ms(const Event& start, const Event& end);
  Device device_ = Device::cpu;
  void* handle_ = nullptr;
  bool recorded_ = false;
  std::chrono::steady_clock::time_point cpu_time_{};  // when recorded, on CPU
};

// s runs nothing enqueued after this call until e is reached (e recorded, same device as s).
void stream_wait(const Stream& s, const Event& e);
// Milliseconds between two recorded events of one device; on CUDA, waits for `end` first.
float elapsed_ms(const Event& start, const Event& end);

}  // namespace megatrain
