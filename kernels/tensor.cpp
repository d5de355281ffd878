#include "kernels/tensor.h"

#include "kernels/cuda/backend.h"
#include "kernels/device.h"

#include <cstdlib>
#include <cstring>

namespace megatrain {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
  }
  return "?";
}

Shape::Shape(std::initializer_list<int64_t> dims) {
  MT_CHECK(dims.size() <= kMaxDims, "a Shape has at most {} dims, got {}", kMaxDims, dims.size());
  for (int64_t d : dims) dim[static_cast<size_t>(ndim++)] = d;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dim[static_cast<size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim != o.ndim) return false;
  for (int i = 0; i < ndim; ++i)
    if (dim[static_cast<size_t>(i)] != o.dim[static_cast<size_t>(i)]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(dim[static_cast<size_t>(i)]);
  return s + ")";
}

float* Tensor::f32() const {
  MT_CHECK(dtype == DType::f32, "tensor is {}, expected f32", dtype_name(dtype));
  return static_cast<float*>(data);
}

int32_t* Tensor::i32() const {
  MT_CHECK(dtype == DType::i32, "tensor is {}, expected i32", dtype_name(dtype));
  return static_cast<int32_t*>(data);
}

Tensor::Tensor(uint16_t* p, Shape s, DType d) : data(p), dtype(d), shape(s) {
  MT_CHECK(d == DType::bf16 || d == DType::f16, "16-bit tensor of dtype {}", dtype_name(d));
}

uint16_t* Tensor::half() const {
  MT_CHECK(dtype == DType::bf16 || dtype == DType::f16, "tensor is {}, expected bf16 or f16", dtype_name(dtype));
  return static_cast<uint16_t*>(data);
}

Tensor Tensor::reshaped(Shape s) const {
  MT_CHECK(s.numel() == numel(), "reshape {} -> {} changes the element count", shape.str(), s.str());
  Tensor t = *this;
  t.shape = s;
  return t;
}

Tensor Tensor::part(int64_t first, Shape s) const {
  MT_CHECK(first >= 0 && first + s.numel() <= numel(), "part [{}, {}) of a tensor of {} elements", first,
           first + s.numel(), numel());
  Tensor t = *this;
  t.data = static_cast<char*>(data) + static_cast<size_t>(first) * dtype_size(dtype);
  t.shape = s;
  return t;
}

void Arena::Free::operator()(void* p) const {
  if (device == Device::cuda)
    cuda_backend().deallocate(p);
  else
    std::free(p);
}

Arena::Arena(size_t bytes) : Arena(bytes, Stream::cpu()) {}

Arena::Arena(size_t bytes, const Stream& s) : capacity_(aligned(bytes)) {
  if (s.device == Device::cuda) {
    DeviceBackend& backend = cuda_backend();
    void* p = backend.allocate(s, capacity_);
    block_ = std::unique_ptr<void, Free>(p, Free{Device::cuda});
    if (p) backend.memset(s, p, 0, capacity_);
    return;
  }
  void* p = capacity_ ? std::aligned_alloc(64, capacity_) : nullptr;
  MT_CHECK(capacity_ == 0 || p, "out of memory allocating {} bytes", capacity_);
  if (p) std::memset(p, 0, capacity_);
  block_.reset(p);
}

Arena Arena::measuring() {
  Arena a;
  a.measuring_ = true;
  return a;
}

void* Arena::alloc_bytes(size_t bytes) {
  size_t n = aligned(bytes);
  if (measuring_) {
    used_ += n;
    return nullptr;
  }
  MT_CHECK(used_ + n <= capacity_, "arena overflow: {} + {} > {} bytes", used_, n, capacity_);
  void* p = static_cast<char*>(block_.get()) + used_;
  used_ += n;
  return p;
}

float* Arena::alloc_f32(int64_t n) { return static_cast<float*>(alloc_bytes(static_cast<size_t>(n) * 4)); }
int32_t* Arena::alloc_i32(int64_t n) { return static_cast<int32_t*>(alloc_bytes(static_cast<size_t>(n) * 4)); }
uint16_t* Arena::alloc_u16(int64_t n) { return static_cast<uint16_t*>(alloc_bytes(static_cast<size_t>(n) * 2)); }

Tensor Arena::tensor(Shape s, DType t) {
  MT_CHECK(t != DType::i32, "Arena::tensor is for float tensors; i32 ones come from tensor_i32");
  const Tensor x = t == DType::f32 ? Tensor(alloc_f32(s.numel()), s) : Tensor(alloc_u16(s.numel()), s, t);
  return x.on(device());
}

}  // namespace megatrain
