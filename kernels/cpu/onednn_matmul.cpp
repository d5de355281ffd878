#include "kernels/cpu/onednn_matmul.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <memory>
#include <tuple>

namespace megatrain::cpu {
namespace {

using dnnl::memory;

struct Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

Engine& engine() {
  thread_local Engine e;
  return e;
}

using Key = std::tuple<MatmulInput, Trans, Trans, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;

struct Cached {
  bool ok = false;  // false: oneDNN has only its reference implementation (or none)
  std::string impl;
  memory::desc a, b, c;
  dnnl::matmul prim;
};

// op(X) of `rows` × `cols` stored row-major with leading dimension ld, transposed or not.
memory::desc operand(memory::data_type dt, Trans t, int64_t rows, int64_t cols, int64_t ld) {
  return t == Trans::no ? memory::desc({rows, cols}, dt, {ld, 1}) : memory::desc({rows, cols}, dt, {1, ld});
}

const Cached& primitive(const Key& k) {
  thread_local std::map<Key, std::unique_ptr<Cached>> cache;
  std::unique_ptr<Cached>& slot = cache[k];
  if (slot) return *slot;
  slot = std::make_unique<Cached>();
  const auto [in, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta] = k;
  const memory::data_type dt = in == MatmulInput::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  slot->a = operand(dt, ta, M, K, lda);
  slot->b = operand(dt, tb, K, N, ldb);
  slot->c = memory::desc({M, N}, memory::data_type::f32, {ldc, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(slot->a, slot->b, slot->c), attr, engine().engine);
    slot->impl = pd.impl_info_str();
    if (slot->impl.rfind("ref", 0) == 0) return *slot;  // the reference loops: slower than converting
    slot->prim = dnnl::matmul(pd);
    slot->ok = true;
  } catch (const dnnl::error&) {
    // unimplemented for this CPU: ok stays false
  }
  return *slot;
}

}  // namespace

bool onednn_matmul(MatmulInput in, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
                   int64_t lda, const void* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const Cached& p = primitive(Key{in, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta});
  if (!p.ok) return false;
  Engine& e = engine();
  p.prim.execute(e.stream, {{DNNL_ARG_SRC, memory(p.a, e.engine, const_cast<void*>(A))},
                            {DNNL_ARG_WEIGHTS, memory(p.b, e.engine, const_cast<void*>(B))},
                            {DNNL_ARG_DST, memory(p.c, e.engine, C)}});
  e.stream.wait();
  return true;
}

std::string onednn_bf16_matmul_impl() {
  const Cached& p = primitive(Key{MatmulInput::bf16, Trans::no, Trans::yes, 256, 768, 768, 768, 768, 768, 1.0f, 0.0f});
  return p.ok ? p.impl : "";
}

}  // namespace megatrain::cpu
