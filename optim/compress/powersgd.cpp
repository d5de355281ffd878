// PowerSGD with error feedback (optim/compress/grad_compression.h): one power iteration per step,
// warm-started, on every large enough 2-D tensor of a reduced range; the rest all-reduced exactly.
#include <algorithm>
#include <cmath>
#include <map>

#include "kernels/ops.h"
#include "kernels/rng.h"
#include "optim/compress/grad_compression.h"

namespace megatrain {
namespace {

class PowerSgd final : public GradCompressor {
 public:
  PowerSgd(const Comm& comm, std::vector<MatrixSpan> matrices, int rank, uint64_t seed)
      : comm_(comm), matrices_(std::move(matrices)), r_(rank), seed_(seed) {
    MT_CHECK(r_ >= 1, "PowerSGD rank {} (must be at least 1)", r_);
    std::sort(matrices_.begin(), matrices_.end(), [](const MatrixSpan& a, const MatrixSpan& b) { return a.offset < b.offset; });
  }

  void reduce(float* g, FlatRange range) override {
    // The compressed tensors of this range, and the rest gathered into one exact all-reduce.
    std::vector<const MatrixSpan*> mats;
    std::vector<FlatRange> rest;
    int64_t at = range.begin, rest_floats = 0, p_floats = 0, q_floats = 0;
    for (const MatrixSpan& m : matrices_) {
      const FlatRange mr{m.offset, m.offset + m.rows * m.cols};
      if (mr.begin < range.begin || mr.end > range.end || std::min(m.rows, m.cols) <= r_) continue;
      if (mr.begin > at) rest.push_back({at, mr.begin});
      at = mr.end;
      mats.push_back(&m);
      p_floats += m.rows * r_;
      q_floats += r_ * m.cols;
    }
    if (at < range.end) rest.push_back({at, range.end});
    for (const FlatRange& x : rest) rest_floats += x.size();

    std::vector<float> rest_buf(static_cast<size_t>(rest_floats));
    float* o = rest_buf.data();
    for (const FlatRange& x : rest) o = std::copy(g + (x.begin - range.begin), g + (x.end - range.begin), o);
    Work rest_work = comm_.all_reduce(rest_buf.data(), rest_floats);

    // P = W·Q for W = g + e of each tensor, summed over ranks.
    const Stream s = Stream::cpu();
    std::vector<float> p_buf(static_cast<size_t>(p_floats)), q_buf(static_cast<size_t>(q_floats), 0.0f);
    int64_t po = 0;
    for (const MatrixSpan* m : mats) {
      State& st = state(*m);
      float* w = g + (m->offset - range.begin);
      const int64_t n = m->rows * m->cols;
      for (int64_t i = 0; i < n; ++i) w[i] += st.error[static_cast<size_t>(i)];
      matmul_forward(s, Tensor(p_buf.data() + po, {m->rows, r_}), Tensor(w, {m->rows, m->cols}),
                     Tensor(st.q.data(), {r_, m->cols}), {});
      po += m->rows * r_;
    }
    comm_.all_reduce(p_buf.data(), p_floats).wait();

    // Orthonormal P, then Q = Pᵀ·W (stored (r, cols)), summed over ranks.
    po = 0;
    int64_t qo = 0;
    for (const MatrixSpan* m : mats) {
      float* p = p_buf.data() + po;
      orthonormalise_columns(p, m->rows);
      matmul_backward(s, {}, Tensor(q_buf.data() + qo, {r_, m->cols}), {}, Tensor(p, {m->rows, r_}),
                      Tensor(g + (m->offset - range.begin), {m->rows, m->cols}), {});
      po += m->rows * r_;
      qo += r_ * m->cols;
    }
    comm_.all_reduce(q_buf.data(), q_floats).wait();

    // The estimate of the sum, P·Q; the error e = W − P·Q / p; Q kept for the next step.
    const float inv_ranks = 1.0f / static_cast<float>(comm_.size());
    po = qo = 0;
    for (const MatrixSpan* m : mats) {
      State& st = state(*m);
      float* w = g + (m->offset - range.begin);
      const int64_t n = m->rows * m->cols;
      std::copy(q_buf.begin() + qo, q_buf.begin() + qo + r_ * m->cols, st.q.begin());
      std::vector<float> approx(static_cast<size_t>(n));
      matmul_backward(s, Tensor(approx.data(), {m->rows, m->cols}), {}, {}, Tensor(p_buf.data() + po, {m->rows, r_}),
                      Tensor(w, {m->rows, m->cols}), Tensor(st.q.data(), {r_, m->cols}));
      for (int64_t i = 0; i < n; ++i) {
        st.error[static_cast<size_t>(i)] = w[i] - approx[static_cast<size_t>(i)] * inv_ranks;
        w[i] = approx[static_cast<size_t>(i)];
      }
      po += m->rows * r_;
      qo += r_ * m->cols;
    }

    rest_work.wait();
    const float* in = rest_buf.data();
    for (const FlatRange& x : rest) {
      std::copy(in, in + x.size(), g + (x.begin - range.begin));
      in += x.size();
    }
  }

  std::vector<float> error(FlatRange r) const override {
    std::vector<float> out(static_cast<size_t>(r.size()), 0.0f);
    for (const auto& [offset, st] : states_)
      for (size_t i = 0; i < st.error.size(); ++i) {
        const int64_t at = offset + static_cast<int64_t>(i);
        if (at >= r.begin && at < r.end) out[static_cast<size_t>(at - r.begin)] = st.error[i];
      }
    return out;
  }

  int64_t state_bytes() const override {
    int64_t floats = 0;
    for (const auto& [offset, st] : states_) floats += static_cast<int64_t>(st.error.size() + st.q.size());
    return floats * static_cast<int64_t>(sizeof(float));
  }

 private:
  struct State {
    std::vector<float> error;  // (rows, cols)
    std::vector<float> q;      // (r, cols): Qᵀ, the layout matmul_forward takes as a weight
  };

  State& state(const MatrixSpan& m) {
    auto [it, fresh] = states_.try_emplace(m.offset);
    if (fresh) {
      it->second.error.assign(static_cast<size_t>(m.rows * m.cols), 0.0f);
      it->second.q.resize(static_cast<size_t>(r_ * m.cols));
      const RngKey key{seed_, static_cast<uint32_t>(RngPurpose::compression),
                       static_cast<uint32_t>(m.offset ^ (m.offset >> 32)), 0};
      for (size_t i = 0; i < it->second.q.size(); ++i) it->second.q[i] = rng_normal(key, i);
    }
    return it->second;
  }

  // Gram–Schmidt on the r columns of p (rows, r), in double; a column that vanishes becomes zero.
  void orthonormalise_columns(float* p, int64_t rows) const {
    std::vector<double> col(static_cast<size_t>(rows));
    for (int j = 0; j < r_; ++j) {
      for (int64_t i = 0; i < rows; ++i) col[static_cast<size_t>(i)] = p[i * r_ + j];
      for (int k = 0; k < j; ++k) {
        double dot = 0.0;
        for (int64_t i = 0; i < rows; ++i) dot += col[static_cast<size_t>(i)] * p[i * r_ + k];
        for (int64_t i = 0; i < rows; ++i) col[static_cast<size_t>(i)] -= dot * p[i * r_ + k];
      }
      double norm = 0.0;
      for (double v : col) norm += v * v;
      norm = std::sqrt(norm);
      const double scale = norm > 1e-30 ? 1.0 / norm : 0.0;
      for (int64_t i = 0; i < rows; ++i) p[i * r_ + j] = static_cast<float>(col[static_cast<size_t>(i)] * scale);
    }
  }

  Comm comm_;
  std::vector<MatrixSpan> matrices_;
  int r_;
  uint64_t seed_;
  std::map<int64_t, State> states_;  // by tensor offset
};

}  // namespace

std::unique_ptr<GradCompressor> make_powersgd(const Comm& comm, std::vector<MatrixSpan> matrices, int rank,
                                              uint64_t seed) {
  return std::make_unique<PowerSgd>(comm, std::move(matrices), rank, seed);
}

}  // namespace megatrain
