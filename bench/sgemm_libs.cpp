// sgemm_libs: times single-precision GEMM at the shapes of GPT-2 124M's linear layers, in
// the three forms a linear layer needs, through one BLAS library chosen at compile time:
//   -DMT_BLAS_OPENBLAS  OpenBLAS (cblas_sgemm)
//   -DMT_BLAS_BLIS      BLIS     (cblas_sgemm)
//   -DMT_BLAS_DNNL      oneDNN   (dnnl_sgemm)
// bench/CMakeLists_sgemm.cmake builds it three times (sgemm_openblas, sgemm_blis, sgemm_dnnl).
//
// Forms, all row-major, W is (OC, C):
//   fwd   out(N,OC)  = inp(N,C) * W^T
//   dinp  dinp(N,C)  = dout(N,OC) * W
//   dW    dW(OC,C)  += dout^T * inp
// Each shape x form: 2 warm-ups, then the median of 5 timed calls. After all shapes of one
// token count N, the time-weighted rate (sum of FLOPs / sum of median times) is printed.
//
// Usage: sgemm_X [N ...]        (default: 256 1024)
// Threads come from the library's usual environment (OMP_NUM_THREADS).
// Run it as:  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 ./sgemm_openblas
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#if defined(MT_BLAS_OPENBLAS) + defined(MT_BLAS_BLIS) + defined(MT_BLAS_DNNL) != 1
#error "define exactly one of MT_BLAS_OPENBLAS, MT_BLAS_BLIS, MT_BLAS_DNNL"
#endif

#if defined(MT_BLAS_DNNL)
#include <dnnl.h>
#else
#include <cblas.h>
#endif

namespace {

#if defined(MT_BLAS_OPENBLAS)
constexpr const char* kLib = "openblas";
#elif defined(MT_BLAS_BLIS)
constexpr const char* kLib = "blis";
#else
constexpr const char* kLib = "dnnl";
#endif

// Row-major C(M,N) = alpha * op(A) * op(B) + beta * C; op(A) is (M,K), op(B) is (K,N).
void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
#if defined(MT_BLAS_DNNL)
  dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (st != dnnl_success) {
    std::fprintf(stderr, "dnnl_sgemm failed with status %d\n", static_cast<int>(st));
    std::exit(1);
  }
#else
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
              static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb),
              beta, C, static_cast<int>(ldc));
#endif
}

struct Layer {
  const char* name;
  int64_t in;   // C of the layer (columns of W)
  int64_t out;  // OC of the layer (rows of W)
};

// GPT-2 124M: d_model 768, vocab padded to 50304.
constexpr int64_t kC = 768;
constexpr Layer kLayers[] = {
    {"qkv", kC, 3 * kC},
    {"attproj", kC, kC},
    {"fc", kC, 4 * kC},
    {"fcproj", 4 * kC, kC},
    {"lmhead", kC, 50304},
};

constexpr int kWarmup = 2;
constexpr int kReps = 5;

void fill(std::vector<float>& v, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (auto& x : v) x = d(rng);
}

template <class F>
double median_seconds(F&& f) {
  for (int i = 0; i < kWarmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < kReps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[kReps / 2];
}

// Spot-checks a few entries of a row-major result against a double-precision dot product, so a
// wrong transpose/leading-dimension argument cannot produce a fast but meaningless number.
// term(i, j, k) returns the k-th product term of entry (i, j).
template <class G>
void check(const char* what, const std::vector<float>& C, int64_t M, int64_t N, int64_t K, G&& term,
           const std::vector<float>* before, float beta) {
  std::mt19937 rng(7);
  for (int s = 0; s < 8; ++s) {
    int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(M));
    int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(N));
    double ref = before ? beta * (*before)[static_cast<size_t>(i * N + j)] : 0.0;
    double mag = 0.0;
    for (int64_t k = 0; k < K; ++k) {
      double p = term(i, j, k);
      ref += p;
      mag += std::fabs(p);
    }
    double got = C[static_cast<size_t>(i * N + j)];
    if (std::fabs(got - ref) > 1e-4 * (mag + 1.0)) {
      std::fprintf(stderr, "%s: %s wrong at (%lld,%lld): got %g, want %g\n", kLib, what, static_cast<long long>(i),
                   static_cast<long long>(j), got, ref);
      std::exit(1);
    }
  }
}

void run(int64_t N) {
  std::mt19937 rng(1234);
  double total_flop = 0.0, total_s = 0.0;
  for (const Layer& L : kLayers) {
    const int64_t C = L.in, OC = L.out;
    std::vector<float> inp(static_cast<size_t>(N * C)), W(static_cast<size_t>(OC * C)),
        dout(static_cast<size_t>(N * OC)), out(static_cast<size_t>(N * OC)), dinp(static_cast<size_t>(N * C)),
        dW(static_cast<size_t>(OC * C), 0.0f);
    fill(inp, rng);
    fill(W, rng);
    fill(dout, rng);
    const double flop = 2.0 * static_cast<double>(N) * static_cast<double>(C) * static_cast<double>(OC);

    // Correctness first (one call each), then timing.
    sgemm(false, true, N, OC, C, 1.0f, inp.data(), C, W.data(), C, 0.0f, out.data(), OC);
    check("fwd", out, N, OC, C,
          [&](int64_t i, int64_t j, int64_t k) { return double(inp[size_t(i * C + k)]) * W[size_t(j * C + k)]; },
          nullptr, 0.0f);
    sgemm(false, false, N, C, OC, 1.0f, dout.data(), OC, W.data(), C, 0.0f, dinp.data(), C);
    check("dinp", dinp, N, C, OC,
          [&](int64_t i, int64_t j, int64_t k) { return double(dout[size_t(i * OC + k)]) * W[size_t(k * C + j)]; },
          nullptr, 0.0f);
    std::fill(dW.begin(), dW.end(), 0.5f);
    std::vector<float> dW0 = dW;
    sgemm(true, false, OC, C, N, 1.0f, dout.data(), OC, inp.data(), C, 1.0f, dW.data(), C);
    check("dW", dW, OC, C, N,
          [&](int64_t i, int64_t j, int64_t k) { return double(dout[size_t(k * OC + i)]) * inp[size_t(k * C + j)]; },
          &dW0, 1.0f);

    struct Form {
      const char* name;
      double s;
    } forms[3] = {
        {"fwd", median_seconds([&] {
           sgemm(false, true, N, OC, C, 1.0f, inp.data(), C, W.data(), C, 0.0f, out.data(), OC);
         })},
        {"dinp", median_seconds([&] {
           sgemm(false, false, N, C, OC, 1.0f, dout.data(), OC, W.data(), C, 0.0f, dinp.data(), C);
         })},
        {"dW", median_seconds([&] {
           // Small alpha keeps the accumulated dW bounded over the repetitions.
           sgemm(true, false, OC, C, N, 1e-3f, dout.data(), OC, inp.data(), C, 1.0f, dW.data(), C);
         })},
    };
    for (const Form& f : forms) {
      std::printf("%-8s N=%-5lld %-8s C=%-5lld OC=%-6lld %-5s %8.1f GFLOP/s  (%.3f ms)\n", kLib,
                  static_cast<long long>(N), L.name, static_cast<long long>(C), static_cast<long long>(OC), f.name,
                  flop / f.s * 1e-9, f.s * 1e3);
      total_flop += flop;
      total_s += f.s;
    }
  }
  std::printf("%-8s N=%-5lld weighted %8.1f GFLOP/s  (%zu shape x form, %.1f ms total)\n", kLib,
              static_cast<long long>(N), total_flop / total_s * 1e-9, std::size(kLayers) * 3, total_s * 1e3);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> ns;
  for (int i = 1; i < argc; ++i) {
    char* end = nullptr;
    long long v = std::strtoll(argv[i], &end, 10);
    if (!end || *end != '\0' || v <= 0) {
      std::fprintf(stderr, "usage: %s [N ...]   (token counts, default 256 1024)\n", argv[0]);
      return 2;
    }
    ns.push_back(v);
  }
  if (ns.empty()) ns = {256, 1024};
  const char* thr = std::getenv("OMP_NUM_THREADS");
  std::printf("# %s sgemm, OMP_NUM_THREADS=%s, median of %d after %d warm-ups\n", kLib, thr ? thr : "(unset)", kReps,
              kWarmup);
  for (int64_t n : ns) run(n);
  return 0;
}
