// The row-major → column-major GEMM mapping (kernels/cuda/gemm_mapping.h) run by a naive
// column-major GEMM that reads the description exactly as cuBLASLt would — transposes, leading
// dimensions, beta, the bias and bias-gradient epilogues — with every access bounds-checked, and
// compared with the row-major definitions of kernels/ops.h. Integer-valued inputs: exact sums.
#include "kernels/cuda/gemm_mapping.h"

#include <gtest/gtest.h>

#include <vector>

namespace megatrain::cuda {
namespace {

using Buf = std::vector<float>;

// Element (i, j) of op(X) for a stored column-major X with leading dimension ld.
float op_at(const Buf& x, bool trans, int64_t ld, int64_t i, int64_t j) {
  const int64_t idx = trans ? j + i * ld : i + j * ld;
  EXPECT_LT(idx, static_cast<int64_t>(x.size())) << "operand read out of bounds";
  return idx < static_cast<int64_t>(x.size()) ? x[static_cast<size_t>(idx)] : 0.0f;
}

// D = op(A)·op(B) + beta·D (+ bias[i] on row i), and the BGRADB bias gradient: Σ_p op(B)(p, j).
void column_major_gemm(const ColumnMajorGemm& g, Buf& d, const Buf& a, const Buf& b, const Buf* bias,
                       Buf* bgrad_b) {
  EXPECT_GE(g.lda, g.trans_a ? g.k : g.m);
  EXPECT_GE(g.ldb, g.trans_b ? g.n : g.k);
  EXPECT_GE(g.ldd, g.m);
  EXPECT_EQ(static_cast<int64_t>(d.size()), g.ldd * g.n) << "D is not exactly the output buffer";
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < g.m; ++i) {
      float acc = 0.0f;
      for (int64_t p = 0; p < g.k; ++p) acc += op_at(a, g.trans_a, g.lda, i, p) * op_at(b, g.trans_b, g.ldb, p, j);
      float& out = d[static_cast<size_t>(i + j * g.ldd)];
      out = acc + g.beta * out + (bias ? (*bias)[static_cast<size_t>(i)] : 0.0f);
    }
  if (bgrad_b) {
    bgrad_b->assign(static_cast<size_t>(g.n), 0.0f);
    for (int64_t j = 0; j < g.n; ++j)
      for (int64_t p = 0; p < g.k; ++p) (*bgrad_b)[static_cast<size_t>(j)] += op_at(b, g.trans_b, g.ldb, p, j);
  }
}

float at(const Buf& v, int64_t i) { return v[static_cast<size_t>(i)]; }

Buf ramp(int64_t n, int salt) {
  Buf v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>((i * 7 + salt) % 11 - 5);
  return v;
}

struct Problem {
  int64_t N = 5, C = 3, OC = 7;  // all different, so a swapped dimension cannot pass
  Buf inp = ramp(N * C, 1), weight = ramp(OC * C, 2), dout = ramp(N * OC, 3), bias = ramp(OC, 4);
  const Buf& operand(GemmOperand o) const {
    return o == GemmOperand::inp ? inp : o == GemmOperand::weight ? weight : dout;
  }
};

TEST(GemmMapping, ForwardIsInpTimesWeightTransposedPlusBias) {
  const Problem p;
  const ColumnMajorGemm g = gemm_mapping(GemmPass::forward, p.N, p.C, p.OC);
  EXPECT_EQ(g.beta, 0.0f);
  Buf out(static_cast<size_t>(p.N * p.OC), 0.0f);
  column_major_gemm(g, out, p.operand(g.a), p.operand(g.b), &p.bias, nullptr);
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t o = 0; o < p.OC; ++o) {
      float ref = at(p.bias, o);
      for (int64_t c = 0; c < p.C; ++c) ref += at(p.inp, n * p.C + c) * at(p.weight, o * p.C + c);
      EXPECT_EQ(at(out, n * p.OC + o), ref) << "out[" << n << "," << o << "]";
    }
}

TEST(GemmMapping, DinpIsDoutTimesWeight) {
  const Problem p;
  const ColumnMajorGemm g = gemm_mapping(GemmPass::dinp, p.N, p.C, p.OC);
  EXPECT_EQ(g.beta, 0.0f);
  Buf dinp(static_cast<size_t>(p.N * p.C), 100.0f);  // overwritten, not accumulated
  column_major_gemm(g, dinp, p.operand(g.a), p.operand(g.b), nullptr, nullptr);
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t c = 0; c < p.C; ++c) {
      float ref = 0.0f;
      for (int64_t o = 0; o < p.OC; ++o) ref += at(p.dout, n * p.OC + o) * at(p.weight, o * p.C + c);
      EXPECT_EQ(at(dinp, n * p.C + c), ref) << "dinp[" << n << "," << c << "]";
    }
}

TEST(GemmMapping, DweightAccumulatesDoutTransposedTimesInpAndBgradbIsDbias) {
  const Problem p;
  const ColumnMajorGemm g = gemm_mapping(GemmPass::dweight, p.N, p.C, p.OC);
  Buf dweight = ramp(p.OC * p.C, 5), dbias;
  const Buf before = dweight;
  column_major_gemm(g, dweight, p.operand(g.a), p.operand(g.b), nullptr, &dbias);
  for (int64_t o = 0; o < p.OC; ++o)
    for (int64_t c = 0; c < p.C; ++c) {
      float ref = at(before, o * p.C + c);
      for (int64_t n = 0; n < p.N; ++n) ref += at(p.dout, n * p.OC + o) * at(p.inp, n * p.C + c);
      EXPECT_EQ(at(dweight, o * p.C + c), ref) << "dweight[" << o << "," << c << "]";
    }
  ASSERT_EQ(static_cast<int64_t>(dbias.size()), p.OC);
  for (int64_t o = 0; o < p.OC; ++o) {
    float ref = 0.0f;
    for (int64_t n = 0; n < p.N; ++n) ref += at(p.dout, n * p.OC + o);
    EXPECT_EQ(at(dbias, o), ref) << "dbias[" << o << "]";
  }
}

}  // namespace
}  // namespace megatrain::cuda
