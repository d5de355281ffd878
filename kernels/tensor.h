// Tensor: a non-owning view (pointer, dtype, shape, device) over memory owned elsewhere —
// a flat parameter buffer or an Arena. Arena: one allocation carved into aligned pieces
// at start-up, so the training step never allocates.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "kernels/check.h"

namespace megatrain {

enum class DType : uint8_t { f32, bf16, f16, i32 };  // bf16, f16: 16-bit float bits (kernels/half.h)
enum class Device : uint8_t { cpu, cuda };

size_t dtype_size(DType t);
const char* dtype_name(DType t);

struct Shape {
  static constexpr int kMaxDims = 4;
  std::array<int64_t, kMaxDims> dim{};
  int ndim = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  int64_t operator[](int i) const { return dim[static_cast<size_t>(i)]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  std::string str() const;
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Device device = Device::cpu;

  Tensor() = default;
  Tensor(float* p, Shape s) : data(p), dtype(DType::f32), shape(s) {}
  Tensor(int32_t* p, Shape s) : data(p), dtype(DType::i32), shape(s) {}
  Tensor(uint16_t* p, Shape s, DType d);  // d = bf16 or f16

  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  float* f32() const;
  int32_t* i32() const;
  uint16_t* half() const;  // bf16 or f16 bits
  // The same memory seen with another shape of equal element count.
  Tensor reshaped(Shape s) const;
  // s.numel() elements from element `first` on, with shape s (same dtype and device).
  Tensor part(int64_t first, Shape s) const;
  // The same view, saying its memory is `d`'s (the caller knows where the pointer points).
  Tensor on(Device d) const {
    Tensor t = *this;
    t.device = d;
    return t;
  }
};

struct Stream;

// Bump allocator over one 64-byte-aligned block. reserve() during planning, then alloc().
// The block is host memory, or device memory of the stream's device (zeroed either way); the
// tensors it hands out carry that device.
class Arena {
 public:
  Arena() = default;
  explicit Arena(size_t bytes);
  Arena(size_t bytes, const Stream& s);
  // An arena that only counts: alloc returns nullptr and used() is the capacity a real one needs.
  static Arena measuring();
  Arena(Arena&&) noexcept = default;
  Arena& operator=(Arena&&) noexcept = default;

  float* alloc_f32(int64_t n);
  int32_t* alloc_i32(int64_t n);
  uint16_t* alloc_u16(int64_t n);
  // A float tensor of dtype t (f32, or the 16-bit bf16 / f16).
  Tensor tensor(Shape s, DType t = DType::f32);
  Tensor tensor_i32(Shape s) { return Tensor(alloc_i32(s.numel()), s).on(device()); }
  Device device() const { return block_.get_deleter().device; }
  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  void reset() { used_ = 0; }
  static size_t aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }

 private:
  void* alloc_bytes(size_t bytes);
  struct Free {
    Device device;
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> block_{nullptr, Free{Device::cpu}};
  size_t capacity_ = 0;
  size_t used_ = 0;
  bool measuring_ = false;
};

}  // namespace megatrain
