#include "kernels/cuda/cudnn_attention.h"

#include <cudnn_frontend.h>
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "kernels/check.h"
#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/sdpa_layout.h"

namespace megatrain::cuda {
namespace {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;
using Key = std::tuple<int, int, int, int, int, Precision>;

Key key_of(const SdpaProblem& p) { return {p.B, p.T, p.H, p.Hkv, p.D, p.precision}; }

// Sets a tensor's dims and strides from a strided view.
void shape(fe::graph::Tensor_attributes& t, const StridedView& v) {
  t.set_dim({v.dims.begin(), v.dims.end()}).set_stride({v.strides.begin(), v.strides.end()});
}
TensorPtr input(fe::graph::Graph& g, const char* name, const StridedView& v) {
  fe::graph::Tensor_attributes t;
  t.set_name(name);
  shape(t, v);
  return g.tensor(t);
}

// One direction's graph, ready to execute, or why cuDNN cannot run it.
struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
  std::string problem;  // "" when built
};

// validate → operation graph → heuristics' plans → support → the built plans, stopping at the first
// step cuDNN refuses.
void build(Plan& plan, cudnnHandle_t handle) {
  fe::graph::Graph& g = *plan.graph;
  auto status = g.validate();
  if (status.is_good()) status = g.build_operation_graph(handle);
  if (status.is_good()) status = g.create_execution_plans({fe::HeurMode_t::A});
  if (status.is_good()) status = g.check_support(handle);
  if (status.is_good()) status = g.build_plans(handle);
  if (status.is_good()) status = g.get_workspace_size(plan.workspace);
  if (!status.is_good()) plan.problem = status.get_message();
}

fe::DataType_t io_type(Precision p) {
  return p == Precision::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

std::shared_ptr<fe::graph::Graph> new_graph(Precision p) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io_type(p))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

using VariantPack = std::unordered_map<TensorPtr, void*>;

// The query, key and value tensors of a graph (or their gradients) at their views' offsets into
// the packed 16-bit buffer `packed` (qkv or dqkv), added to the variant pack (cuDNN only reads
// the inputs).
void add_heads(VariantPack& pack, const TensorPtr& q, const TensorPtr& k, const TensorPtr& v, const void* packed,
               const SdpaLayout& l) {
  const auto at = [&](const StridedView& view) {
    return const_cast<char*>(static_cast<const char*>(packed) + 2 * view.offset);
  };
  pack.emplace(q, at(l.q)), pack.emplace(k, at(l.k)), pack.emplace(v, at(l.v));
}

}  // namespace

struct CudnnAttention::Impl {
  struct Forward {
    Plan plan;
    TensorPtr q, k, v, o, stats;
  };
  struct Backward {
    Plan plan;
    TensorPtr q, k, v, o, dout, stats, dq, dk, dv;
  };
  struct Entry {
    Forward fwd;
    Backward bwd;
  };

  explicit Impl(CachingAllocator& m) : memory(m) {
    const cudnnStatus_t s = cudnnCreate(&handle);
    MT_THROW_UNLESS(Error, s == CUDNN_STATUS_SUCCESS,
                    "cuDNN: cudnnCreate failed: {} (is libcudnn for this driver installed?)", cudnnGetErrorString(s));
  }
  ~Impl() { cudnnDestroy(handle); }

  // The problem's two plans, built on first use.
  Entry& entry(const SdpaProblem& p) {
    std::unique_ptr<Entry>& e = entries[key_of(p)];
    if (e) return *e;
    e = std::make_unique<Entry>();
    const SdpaLayout l = sdpa_layout(p.B, p.T, p.H, p.Hkv, p.D);
    const float scale = 1.0f / std::sqrt(static_cast<float>(p.D));

    Forward& f = e->fwd;
    f.plan.graph = new_graph(p.precision);
    fe::graph::Graph& g = *f.plan.graph;
    f.q = input(g, "q", l.q), f.k = input(g, "k", l.k), f.v = input(g, "v", l.v);
    auto attrs = fe::graph::SDPA_attributes()
                     .set_name("attention")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(scale);
    auto [o, stats] = g.sdpa(f.q, f.k, f.v, attrs);
    f.o = o, f.stats = stats;
    f.o->set_output(true);
    shape(*f.o, l.o);
    f.stats->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    shape(*f.stats, l.stats);
    build(f.plan, handle);

    Backward& b = e->bwd;
    b.plan.graph = new_graph(p.precision);
    fe::graph::Graph& gb = *b.plan.graph;
    b.q = input(gb, "q", l.q), b.k = input(gb, "k", l.k), b.v = input(gb, "v", l.v);
    b.o = input(gb, "o", l.o), b.dout = input(gb, "dout", l.o);
    b.stats = input(gb, "stats", l.stats);
    b.stats->set_data_type(fe::DataType_t::FLOAT);
    auto battrs = fe::graph::SDPA_backward_attributes()
                      .set_name("attention_backward")
                      .set_causal_mask(true)
                      .set_attn_scale(scale);
    auto [dq, dk, dv] = gb.sdpa_backward(b.q, b.k, b.v, b.o, b.dout, b.stats, battrs);
    b.dq = dq, b.dk = dk, b.dv = dv;
    for (auto [t, v] : {std::pair{b.dq, l.q}, std::pair{b.dk, l.k}, std::pair{b.dv, l.v}}) {
      t->set_output(true);
      shape(*t, v);
    }
    build(b.plan, handle);
    return *e;
  }

  void execute(cudaStream_t stream, const Plan& plan, VariantPack& pack, const char* what) {
    MT_THROW_UNLESS(Error, plan.problem.empty(), "cuDNN attention {}: {}", what, plan.problem);
    MT_THROW_UNLESS(Error, cudnnSetStream(handle, stream) == CUDNN_STATUS_SUCCESS,
                    "cuDNN attention {}: cudnnSetStream failed", what);
    void* workspace = plan.workspace > 0 ? memory.allocate(static_cast<size_t>(plan.workspace), stream) : nullptr;
    auto status = plan.graph->execute(handle, pack, workspace);
    memory.deallocate(workspace);  // reused only on this stream, after the work enqueued on it
    MT_THROW_UNLESS(Error, status.is_good(), "cuDNN attention {}: {}", what, status.get_message());
  }

  CachingAllocator& memory;
  cudnnHandle_t handle = nullptr;
  std::mutex mutex;
  std::map<Key, std::unique_ptr<Entry>> entries;
};

CudnnAttention::CudnnAttention(CachingAllocator& memory) : impl_(std::make_unique<Impl>(memory)) {}
CudnnAttention::~CudnnAttention() = default;

std::string CudnnAttention::unsupported(const SdpaProblem& p) {
  const std::lock_guard lock(impl_->mutex);
  if (p.precision == Precision::fp32) return "cuDNN's fused attention takes bf16 or fp16 tensors, not float32";
  const Impl::Entry& e = impl_->entry(p);
  if (!e.fwd.plan.problem.empty()) return "forward: " + e.fwd.plan.problem;
  if (!e.bwd.plan.problem.empty()) return "backward: " + e.bwd.plan.problem;
  return "";
}

void CudnnAttention::forward(cudaStream_t stream, const SdpaProblem& p, void* o, float* stats, const void* qkv) {
  const std::lock_guard lock(impl_->mutex);
  const Impl::Forward& f = impl_->entry(p).fwd;
  const SdpaLayout l = sdpa_layout(p.B, p.T, p.H, p.Hkv, p.D);
  VariantPack pack = {{f.o, o}, {f.stats, stats}};
  add_heads(pack, f.q, f.k, f.v, qkv, l);
  impl_->execute(stream, f.plan, pack, "forward");
}

void CudnnAttention::backward(cudaStream_t stream, const SdpaProblem& p, void* dqkv, const void* dout, const void* qkv,
                              const void* o, const float* stats) {
  const std::lock_guard lock(impl_->mutex);
  const Impl::Backward& b = impl_->entry(p).bwd;
  const SdpaLayout l = sdpa_layout(p.B, p.T, p.H, p.Hkv, p.D);
  VariantPack pack = {
      {b.o, const_cast<void*>(o)}, {b.dout, const_cast<void*>(dout)}, {b.stats, const_cast<float*>(stats)}};
  add_heads(pack, b.q, b.k, b.v, qkv, l);
  add_heads(pack, b.dq, b.dk, b.dv, dqkv, l);
  impl_->execute(stream, b.plan, pack, "backward");
}

}  // namespace megatrain::cuda
