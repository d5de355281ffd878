// cuDNN's fused attention (kernels/cuda/cudnn_attention.h) through the attention ops on a bf16
// stream, against the flash kernels on the same float32 inputs (on a GPU; label cuda). cuDNN reads
// q, k and v rounded to bf16 (8 significant bits, a relative error of at most 2^-9 each), rounds
// the probabilities before multiplying them with v, and its output and input gradients come back
// through bf16: every element within 2 % of the tensor's largest, the log-sum-exp within 0.02
// (it is about ln T and sums float32 exponentials of scores off by a few 2^-9 relative). A
// sequence that is not a multiple of any tile size, grouped-query heads, head dims 64 and 128.
// automatic picks cuDNN on a bf16 stream and the flash kernels on a float32 one; cudnn on a
// float32 stream is an error naming the fix.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/backend.h"
#include "kernels/flat_buffer.h"
#include "tests/kernels/op_harness.h"
#include "tests/simt/test_backend.h"

namespace megatrain {
namespace {

struct Outputs {
  std::vector<float> out, lse, dqkv;
};

class CudnnAttention : public ::testing::Test {
 protected:
  void SetUp() override { set_cuda_backend(backend_.get()); }
  void TearDown() override { set_cuda_backend(nullptr); }

  // Forward and backward of one shape on `impl`, on a stream of precision p.
  Outputs run(AttentionImpl impl, Precision p, int B, int T, int H, int Hkv, int D) {
    backend_->set_attention(impl);
    const Stream s{Device::cuda, nullptr, p};
    const int64_t row = int64_t{H + 2 * Hkv} * D, n_qkv = B * T * row, n_out = int64_t{B} * T * H * D;
    FlatBuffer qkv(n_qkv, s), out(n_out, s), lse(int64_t{B} * H * T, s), dout(n_out, s), dqkv(n_qkv, s);
    copy_from_host(s, qkv.part(0, n_qkv), test::randn(static_cast<size_t>(n_qkv), 11).data());
    copy_from_host(s, dout.part(0, n_out), test::randn(static_cast<size_t>(n_out), 12).data());
    const Tensor qkv_t = qkv.part(0, n_qkv).reshaped({B, T, row}), out_t = out.part(0, n_out).reshaped({B, T, H * D});
    const Tensor lse_t = lse.part(0, int64_t{B} * H * T).reshaped({B, H, T});
    attention_forward(s, out_t, lse_t, qkv_t, H, Hkv);
    attention_backward(s, dqkv.part(0, n_qkv).reshaped({B, T, row}), dout.part(0, n_out).reshaped({B, T, H * D}),
                       qkv_t, out_t, lse_t, H, Hkv);
    Outputs r{std::vector<float>(static_cast<size_t>(n_out)), std::vector<float>(static_cast<size_t>(B * H * T)),
              std::vector<float>(static_cast<size_t>(n_qkv))};
    copy_to_host(s, r.out.data(), out.part(0, n_out));
    copy_to_host(s, r.lse.data(), lse.part(0, int64_t{B} * H * T));
    copy_to_host(s, r.dqkv.data(), dqkv.part(0, n_qkv));
    return r;
  }

  static void expect_within(const std::vector<float>& got, const std::vector<float>& want, double tol,
                            const std::string& what) {
    double largest = 0.0, worst = 0.0;
    for (float w : want) largest = std::max(largest, std::fabs(static_cast<double>(w)));
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    EXPECT_LE(worst, tol * largest) << what << ": largest difference " << worst << " against |max| " << largest;
  }

  std::unique_ptr<DeviceBackend> backend_ = test::make_test_backend();
};

TEST_F(CudnnAttention, MatchesTheFlashKernelsWithinBf16Rounding) {
  struct Shape {
    int B, T, H, Hkv, D;
  };
  for (const Shape c : {Shape{2, 200, 4, 2, 64}, Shape{1, 333, 8, 8, 128}, Shape{2, 64, 6, 1, 64}}) {
    const std::string name = fmt::format("B {} T {} H {} Hkv {} D {}", c.B, c.T, c.H, c.Hkv, c.D);
    const Outputs flash = run(AttentionImpl::flash, Precision::bf16, c.B, c.T, c.H, c.Hkv, c.D);
    const Outputs cudnn = run(AttentionImpl::cudnn, Precision::bf16, c.B, c.T, c.H, c.Hkv, c.D);
    expect_within(cudnn.out, flash.out, 0.02, name + " out");
    expect_within(cudnn.dqkv, flash.dqkv, 0.02, name + " dqkv");
    for (size_t i = 0; i < flash.lse.size(); ++i) ASSERT_NEAR(cudnn.lse[i], flash.lse[i], 0.02) << name << " lse " << i;
  }
}

TEST_F(CudnnAttention, AutomaticChoosesByPrecisionAndCudnnOnFloat32IsAnError) {
  backend_->set_attention(AttentionImpl::automatic);
  const AttentionPath bf16 = backend_->attention_path(Stream{Device::cuda, nullptr, Precision::bf16}, 2, 128, 4, 2, 64);
  EXPECT_EQ(bf16.path.rfind("cuDNN's fused attention on bf16 copies", 0), 0u) << bf16.path;
  EXPECT_NE(bf16.path.find("(cuDNN 9."), std::string::npos) << bf16.path;  // the loaded library's version
  EXPECT_EQ(bf16.warning, "");
  const AttentionPath fp32 = backend_->attention_path(Stream{Device::cuda, nullptr, Precision::fp32}, 2, 128, 4, 2, 64);
  EXPECT_EQ(fp32.path.rfind("the flash-attention kernels, float32 (train.precision is fp32", 0), 0u) << fp32.path;
  EXPECT_EQ(fp32.warning, "");  // float32 never asks for cuDNN
  try {
    run(AttentionImpl::cudnn, Precision::fp32, 1, 64, 2, 2, 64);
    ADD_FAILURE() << "cudnn on a float32 stream ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("set attention_backend = \"auto\" or \"flash\""), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace megatrain
