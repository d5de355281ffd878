// AdamW on a CUDA stream (optim/adamw.h) through the emulated device backend (backend_simt.h):
// its moments in device memory, the parameters and gradients it is given too. Over steps with
// clipping, weight decay on matrices only and a loss-scale unscale, parameters, moments and the
// gradient norm equal the CPU optimizer's within 1e-6 of each buffer's largest element (float32
// elementwise updates; the norm's sum runs in another order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "optim/adamw.h"
#include "optim/clip.h"
#include "tests/model/tiny_models.h"
#include "tests/simt/against_cpu.h"
#include "tests/simt/test_backend.h"

namespace megatrain {
namespace {

constexpr double kRtol = 1e-6;

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double largest = 0.0, worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    largest = std::max(largest, std::fabs(static_cast<double>(want[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
  }
  ASSERT_GT(largest, 0.0) << what;
  EXPECT_LE(worst, kRtol * largest) << what;
}

class OptimizerOnDevice : public ::testing::Test {
 protected:
  void SetUp() override { set_cuda_backend(backend_.get()); }
  void TearDown() override { set_cuda_backend(nullptr); }
  std::unique_ptr<DeviceBackend> backend_ = test::make_test_backend();
};

TEST_F(OptimizerOnDevice, AdamWOnACudaStreamUpdatesLikeTheCpu) {
  const ModelConfig cfg = test::gpt2_like();
  const ParamLayout layout = gpt_param_layout(cfg, TpCoord{}, false, StageRange{0, cfg.n_layers, true, true});
  const int64_t n = layout.total();
  const auto bytes = static_cast<size_t>(n) * sizeof(float);
  const Stream gpu{Device::cuda, nullptr, Precision::fp32};
  std::vector<float> params(static_cast<size_t>(n));
  init_params(layout, params.data(), cfg, 3);
  FlatBuffer dev_params(n, gpu), dev_grads(n, gpu);
  ASSERT_EQ(dev_params.device(), Device::cuda);
  backend_->copy_to_device(gpu, dev_params.data(), params.data(), bytes);
  AdamWOptions opt;
  opt.grad_clip = 0.5f;
  AdamW cpu(layout, opt), dev(layout, opt, gpu);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> grads = test::randn(static_cast<size_t>(n), 40 + static_cast<uint32_t>(step), 0.02f);
    backend_->copy_to_device(gpu, dev_grads.data(), grads.data(), bytes);
    const double want_norm = grad_norm(Stream::cpu(), {GradPart(grads.data(), n)}),
                 got_norm = grad_norm(gpu, {GradPart(dev_grads.data(), n, Device::cuda)});
    EXPECT_NEAR(got_norm, want_norm, kRtol * want_norm) << "step " << step;
    ASSERT_GT(want_norm, opt.grad_clip) << "the steps should clip";
    cpu.step(params.data(), grads.data(), 1e-2f, want_norm, 0.5f);
    dev.step(dev_params.data(), dev_grads.data(), 1e-2f, got_norm, 0.5f);
  }
  const auto to_host = [&](const float* p) {
    std::vector<float> out(static_cast<size_t>(n));
    backend_->copy_to_host(gpu, out.data(), p, bytes);
    return out;
  };
  const auto host = [&](const float* p) { return std::vector<float>(p, p + n); };
  expect_close(to_host(dev_params.data()), params, "parameters");
  expect_close(to_host(dev.exp_avg()), host(cpu.exp_avg()), "exp_avg");
  expect_close(to_host(dev.exp_avg_sq()), host(cpu.exp_avg_sq()), "exp_avg_sq");
}

}  // namespace
}  // namespace megatrain
