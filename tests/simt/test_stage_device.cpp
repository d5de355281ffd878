// A model stage on a CUDA stream (StageOptions::device) — its activations in device memory, its
// parameters and gradients in device memory through the UnitState — computes what the same stage
// on the CPU computes: the ops' dispatch, the kernels (their own source under the host SIMT
// emulation, backend_simt.h) and the stage's host <-> device traffic (tokens and targets up, the
// token losses down, a stage's input and output gradient handed on in device memory), MoE blocks
// included.
//
// Tolerance: float32 on both sides with sums in different orders, compounded through the layers,
// the head and back: the loss within 1e-6 relative, every gradient tensor within 1e-5 of its
// largest element (measured: 6e-7 at most; a wrong index, a lost term or a skipped upload is
// orders of magnitude above).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/flat_buffer.h"
#include "model/stage.h"
#include "tests/model/tiny_models.h"
#include "tests/simt/test_backend.h"

namespace megatrain {
namespace {

constexpr int kB = 2, kT = 8;
constexpr double kLossRtol = 1e-6, kGradRtol = 1e-5;

ForwardOptions training(uint64_t first_sample) {
  ForwardOptions o;
  o.grad = LossGrad::in_place;
  o.dloss_scale = 1.0f / static_cast<float>(2 * kB * kT);  // two micro-batches make the global batch
  o.dropout = true;
  o.dropout_seed = 5;
  o.first_sample = first_sample;
  return o;
}

class StageOnDevice : public ::testing::Test {
 protected:
  void SetUp() override { set_cuda_backend(backend_.get()); }
  void TearDown() override { set_cuda_backend(nullptr); }
  std::unique_ptr<DeviceBackend> backend_ = test::make_test_backend();
};

// Parameters initialised from a seed and zero gradients, in the memory of `device`.
class Buffers {
 public:
  Buffers(Device device, const ParamLayout& layout, const ModelConfig& cfg)
      : stream_{device, nullptr, Precision::fp32}, n_(layout.total()), params_(n_, stream_), grads_(n_, stream_) {
    std::vector<float> init(static_cast<size_t>(n_));
    init_params(layout, init.data(), cfg, 11);
    copy_from_host(stream_, params_.part(0, n_), init.data());
  }
  float* params() { return params_.data(); }
  float* grads() { return grads_.data(); }
  std::vector<float> grads_on_host() {
    std::vector<float> out(static_cast<size_t>(n_));
    copy_to_host(stream_, out.data(), grads_.part(0, n_));
    return out;
  }

 private:
  Stream stream_;
  int64_t n_;
  FlatBuffer params_, grads_;
};

// One pipeline stage with its buffers (MoE experts' included) on `device`.
struct DeviceStage {
  ParamLayout layout;
  Buffers buffers;
  FullState state, experts;
  Stage stage;
  DeviceStage(Device device, const ModelConfig& cfg, StageRange range, StageOptions options)
      : layout(gpt_param_layout(cfg, TpCoord{}, false, range)), buffers(device, layout, cfg),
        state(gpt_param_units(layout, range), buffers.params(), buffers.grads()),
        experts(moe_expert_units(layout, {range}), buffers.params(), buffers.grads()),
        stage(cfg, kB, kT, layout, range, with_device(options, device), state,
              TensorParallel(int64_t{kB} * kT, cfg.d_model), StageExperts{&experts, {}}) {}
  static StageOptions with_device(StageOptions o, Device d) {
    o.device = d;
    return o;
  }
};

void expect_same_gradients(const ParamLayout& layout, const std::vector<float>& got, const std::vector<float>& want,
                           const std::string& what) {
  for (size_t i = 0; i < layout.size(); ++i) {
    const auto begin = static_cast<size_t>(layout.offset(i));
    const auto n = static_cast<size_t>(layout.local_shape(i).numel());
    double largest = 0.0;
    for (size_t j = begin; j < begin + n; ++j) largest = std::max(largest, std::fabs(static_cast<double>(want[j])));
    // The aux-free router bias is state, moved by the trainer, never by a gradient.
    const bool state = layout.spec(i).name.ends_with("router.bias");
    ASSERT_TRUE(state ? largest == 0.0 : largest > 0.0) << what << ": " << layout.spec(i).name << " has gradient "
                                                        << largest << " on the CPU";
    double worst = 0.0;
    for (size_t j = begin; j < begin + n; ++j)
      worst = std::max(worst, std::fabs(static_cast<double>(got[j]) - static_cast<double>(want[j])));
    EXPECT_LE(worst, kGradRtol * largest) << what << ": " << layout.spec(i).name;
  }
}

// A whole-model stage of `cfg` on the CPU and on the device, two micro-batches in flight (forward
// A, forward B, backward B, backward A, so each keeps its own activations and plan for backward):
// the losses and the accumulated gradients of the device stage equal the CPU stage's. Token seeds
// start at `seed`.
void expect_two_in_flight_alike(const ModelConfig& cfg, uint32_t seed, const std::string& what) {
  const StageRange whole{0, cfg.n_layers, true, true};
  StageOptions options;
  options.slots = 2;
  DeviceStage cpu(Device::cpu, cfg, whole, options), dev(Device::cuda, cfg, whole, options);
  const auto in_a = test::tokens(kB * kT, cfg.vocab_size, seed);
  const auto tg_a = test::tokens(kB * kT, cfg.vocab_size, seed + 1);
  const auto in_b = test::tokens(kB * kT, cfg.vocab_size, seed + 2);
  const auto tg_b = test::tokens(kB * kT, cfg.vocab_size, seed + 3);
  const MicroBatch a{in_a.data(), tg_a.data(), training(0)}, b{in_b.data(), tg_b.data(), training(kB)};
  for (int slot : {0, 1}) {
    const MicroBatch& mb = slot == 0 ? a : b;
    const float want = cpu.stage.forward(slot, mb), got = dev.stage.forward(slot, mb);
    EXPECT_NEAR(got, want, kLossRtol * std::fabs(want)) << what << " micro-batch " << slot;
  }
  for (int slot : {1, 0}) {
    EXPECT_EQ(cpu.stage.backward(slot).data, nullptr);
    EXPECT_EQ(dev.stage.backward(slot).data, nullptr);
  }
  expect_same_gradients(cpu.layout, dev.buffers.grads_on_host(), cpu.buffers.grads_on_host(), what);
}

TEST_F(StageOnDevice, AWholeModelStageComputesTheCpuLossesAndGradients) {
  expect_two_in_flight_alike(test::gpt2_like(), 1, "gpt2-like");
  expect_two_in_flight_alike(test::llama_like(), 1, "llama-like");
}

// A model cut into two stages on the device: the first stage's output (device memory) is the
// second's input, and the second's input gradient the first's output gradient, as a pipeline on
// one GPU per stage hands them over; with full recompute on the first stage.
TEST_F(StageOnDevice, TwoStagesHandTheirActivationsAndGradientsOverInDeviceMemory) {
  ModelConfig cfg = test::llama_like();
  const StageRange first{0, 1, true, false}, last{1, 1, false, true};
  StageOptions recompute;
  recompute.recompute = Recompute::full;
  DeviceStage cpu_first(Device::cpu, cfg, first, recompute), cpu_last(Device::cpu, cfg, last, {});
  DeviceStage dev_first(Device::cuda, cfg, first, recompute), dev_last(Device::cuda, cfg, last, {});
  const auto in = test::tokens(kB * kT, cfg.vocab_size, 1), tg = test::tokens(kB * kT, cfg.vocab_size, 2);
  const MicroBatch mb{in.data(), tg.data(), training(0)};
  cpu_first.stage.forward(0, mb);
  dev_first.stage.forward(0, mb);
  ASSERT_EQ(dev_first.stage.output(0).device, Device::cuda);
  const float want = cpu_last.stage.forward(0, mb, cpu_first.stage.output(0));
  const float got = dev_last.stage.forward(0, mb, dev_first.stage.output(0));
  EXPECT_NEAR(got, want, kLossRtol * std::fabs(want));
  const Tensor cpu_din = cpu_last.stage.backward(0), dev_din = dev_last.stage.backward(0);
  ASSERT_EQ(dev_din.device, Device::cuda);
  cpu_first.stage.backward(0, cpu_din);
  dev_first.stage.backward(0, dev_din);
  expect_same_gradients(cpu_first.layout, dev_first.buffers.grads_on_host(), cpu_first.buffers.grads_on_host(),
                        "first stage");
  expect_same_gradients(cpu_last.layout, dev_last.buffers.grads_on_host(), cpu_last.buffers.grads_on_host(),
                        "last stage");
}

// MoE blocks on the device: the router on the host with the logits down and the plan up ([Note:
// host routing] in model/moe.cpp), the tokens permuted, exchanged, run through the experts and
// combined on the device. Dropless, with capacity (both drop policies), with a shared expert and
// the aux-free router bias.
TEST_F(StageOnDevice, AnMoeStageComputesTheCpuLossesAndGradients) {
  ModelConfig position = test::moe_like(test::llama_like(), RouterKind::sigmoid, 1.0f);
  position.moe.drop_policy = DropPolicy::position;
  expect_two_in_flight_alike(test::moe_like(test::gpt2_like(), RouterKind::softmax, 0.0f), 5, "dropless");
  expect_two_in_flight_alike(test::moe_like(test::gpt2_like(), RouterKind::softmax, 1.0f), 5, "capacity, probs");
  expect_two_in_flight_alike(position, 5, "capacity, position");
  expect_two_in_flight_alike(test::moe_branch_like(test::gpt2_like(), 1), 5, "shared expert");
}

}  // namespace
}  // namespace megatrain
