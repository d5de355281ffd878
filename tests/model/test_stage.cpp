// The model as pipeline stages, in one process: a model cut into two stages (embedding + first
// block | second block + head), the first stage's output handed to the second and the input
// gradient handed back, computes bitwise the loss and every parameter gradient of the whole model,
// and each stage initialises its own tensors to the whole model's values. Micro-batch slots: two
// micro-batches in flight, run forward A, forward B, backward B, backward A, accumulate exactly
// what running them one after the other does. The split backward of zero-bubble schedules (input
// gradients, then the linear layers' weight gradients later) adds bitwise what the whole backward
// adds, however late the weight steps run. Activation recompute (selective: the attention core;
// full: whole blocks) gives bitwise the same loss and gradients with less activation memory. Both
// hold for a bf16 stage too, whose GEMM-facing activations are bf16 ([Note: activation dtype]): it
// holds exactly those tensors in half the bytes and trains like the float32 stage within bf16's
// rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/flat_buffer.h"
#include "model/gpt.h"
#include "model/stage.h"
#include "tests/model/tiny_models.h"

namespace megatrain {
namespace {

constexpr int kB = 2, kT = 8;
constexpr uint64_t kSeed = 11;

ForwardOptions training(uint64_t first_sample) {
  ForwardOptions o;
  o.grad = LossGrad::in_place;
  o.dloss_scale = 1.0f / static_cast<float>(kB * kT);
  o.dropout = true;
  o.dropout_seed = 5;
  o.first_sample = first_sample;
  return o;
}

// A stage over buffers of its own, initialised from the seed, gradients zero.
struct OwnedStage {
  ParamLayout layout;
  FlatBuffer params, grads;
  FullState state;
  Stage stage;
  OwnedStage(const ModelConfig& cfg, StageRange range, StageOptions options)
      : layout(gpt_param_layout(cfg, TpCoord{}, false, range)), params(layout.total()), grads(layout.total()),
        state(gpt_param_units(layout, range), params.data(), grads.data()),
        stage(cfg, kB, kT, layout, range, options, state, TensorParallel(int64_t{kB} * kT, cfg.d_model)) {
    init_params(layout, params.data(), cfg, kSeed);
  }
};

// Every tensor of `part` equals the same-named tensor of `whole`, bitwise.
void expect_same_tensors(const ParamLayout& part, const float* p, const ParamLayout& whole, const float* w,
                         const std::string& what) {
  for (size_t i = 0; i < part.size(); ++i) {
    const size_t j = whole.index_of(part.spec(i).name);
    const int64_t n = part.local_shape(i).numel();
    const std::vector<float> a(p + part.offset(i), p + part.offset(i) + n), b(w + whole.offset(j), w + whole.offset(j) + n);
    EXPECT_EQ(a, b) << what << ": " << part.spec(i).name;
  }
}

TEST(Stage, TwoStagesComputeTheWholeModelsLossAndGradients) {
  ModelConfig cfg = test::gpt2_like();
  cfg.tie_embeddings = false;  // a tied head needs the embedding on its stage
  for (const ModelConfig& c : {cfg, test::llama_like()}) {
    GptModel whole(c, kB, kT);
    whole.init(kSeed);
    whole.zero_grads();
    const auto in = test::tokens(kB * kT, c.vocab_size, 1), tg = test::tokens(kB * kT, c.vocab_size, 2);
    const float want = whole.forward(in.data(), tg.data(), training(4));
    whole.backward();

    OwnedStage first(c, StageRange{0, 1, true, false}, {1}), last(c, StageRange{1, 1, false, true}, {1});
    ASSERT_EQ(first.layout.size() + last.layout.size(), whole.layout().size());
    expect_same_tensors(first.layout, first.params.data(), whole.layout(), whole.params(), "first stage init");
    expect_same_tensors(last.layout, last.params.data(), whole.layout(), whole.params(), "last stage init");
    const MicroBatch mb{in.data(), tg.data(), training(4)};
    EXPECT_EQ(first.stage.forward(0, mb), 0.0f);
    EXPECT_EQ(last.stage.forward(0, mb, first.stage.output(0)), want);
    const Tensor din = last.stage.backward(0);
    EXPECT_EQ(din.numel(), first.stage.output(0).numel());
    EXPECT_EQ(first.stage.backward(0, din).data, nullptr);
    expect_same_tensors(first.layout, first.grads.data(), whole.layout(), whole.grads(), "first stage grads");
    expect_same_tensors(last.layout, last.grads.data(), whole.layout(), whole.grads(), "last stage grads");
  }
}

TEST(Stage, SlotsKeepMicroBatchesApart) {
  for (const ModelConfig& c : {test::gpt2_like(), test::llama_like()}) {
    const auto a_in = test::tokens(kB * kT, c.vocab_size, 1), a_tg = test::tokens(kB * kT, c.vocab_size, 2);
    const auto b_in = test::tokens(kB * kT, c.vocab_size, 3), b_tg = test::tokens(kB * kT, c.vocab_size, 4);
    const MicroBatch a{a_in.data(), a_tg.data(), training(0)}, b{b_in.data(), b_tg.data(), training(2)};
    OwnedStage one(c, whole_model(c), {1}), two(c, whole_model(c), {2});
    const float la = one.stage.forward(0, a);
    one.stage.backward(0);
    const float lb = one.stage.forward(0, b);
    one.stage.backward(0);
    EXPECT_EQ(two.stage.forward(0, a), la);
    EXPECT_EQ(two.stage.forward(1, b), lb);
    two.stage.backward(1);
    two.stage.backward(0);
    // Accumulation order differs (B then A), so equal within fp32 rounding of one addition.
    for (int64_t i = 0; i < one.layout.total(); ++i)
      ASSERT_NEAR(two.grads.data()[i], one.grads.data()[i], 1e-7f + 1e-6f * std::abs(one.grads.data()[i]))
          << "flat " << i;
    EXPECT_GT(two.stage.activation_bytes(), one.stage.activation_bytes());
  }
}

// A rank of an interleaved pipeline (pp = 2, two chunks of a 4-block model: blocks 0 with the
// embedding, and block 2) keeps both chunks in one layout and one state, each chunk reaching its
// units through a UnitSlice; each computes bitwise what the same stage alone computes.
TEST(Stage, ChunksOfOneRankShareALayoutAndComputeLikeStagesAlone) {
  ModelConfig c = test::llama_like();
  c.n_layers = 4;
  const std::vector<StageRange> ranges{{0, 1, true, false}, {2, 1, false, false}};
  const ParamLayout layout = gpt_param_layout(c, TpCoord{}, false, ranges);
  const std::vector<FlatRange> units = gpt_param_units(layout, ranges);
  ASSERT_EQ(units.size(), 3u);  // embedding, block 0, block 2
  EXPECT_EQ(units.front().begin, 0);
  EXPECT_EQ(units.back().end, layout.total());
  FlatBuffer params(layout.total()), grads(layout.total());
  init_params(layout, params.data(), c, kSeed);
  FullState state(units, params.data(), grads.data());
  UnitSlice first_units(state, 0), second_units(state, 2);
  const TensorParallel tp(int64_t{kB} * kT, c.d_model);
  Stage first(c, kB, kT, layout, ranges[0], {1}, first_units, tp), second(c, kB, kT, layout, ranges[1], {1}, second_units, tp);
  OwnedStage first_alone(c, ranges[0], {1}), second_alone(c, ranges[1], {1});

  const auto in = test::tokens(kB * kT, c.vocab_size, 1), tg = test::tokens(kB * kT, c.vocab_size, 2);
  std::vector<float> dhidden(static_cast<size_t>(kB * kT * c.d_model));
  for (size_t i = 0; i < dhidden.size(); ++i) dhidden[i] = 1e-3f * std::cos(0.11f * static_cast<float>(i));
  const Tensor dout(dhidden.data(), Shape{kB * kT, c.d_model});
  const MicroBatch mb{in.data(), tg.data(), training(0)};
  for (auto [a, b] : {std::pair{&first, &second}, std::pair{&first_alone.stage, &second_alone.stage}}) {
    a->forward(0, mb);
    b->forward(0, mb, a->output(0));
    a->backward(0, b->backward(0, dout));
  }
  const auto values = [](Tensor t) { return std::vector<float>(t.f32(), t.f32() + t.numel()); };
  EXPECT_EQ(values(second.output(0)), values(second_alone.stage.output(0)));
  expect_same_tensors(first_alone.layout, first_alone.grads.data(), layout, grads.data(), "chunk 0 grads");
  expect_same_tensors(second_alone.layout, second_alone.grads.data(), layout, grads.data(), "chunk 1 grads");
  GptModel whole(c, kB, kT);
  whole.init(kSeed);
  expect_same_tensors(layout, params.data(), whole.layout(), whole.params(), "initial values");
}

TEST(Stage, RecomputeGivesBitwiseTheSameGradientsWithLessMemory) {
  for (const Precision p : {Precision::fp32, Precision::bf16})
  for (const ModelConfig& c : {test::gpt2_like(), test::llama_like()}) {
    const auto a_in = test::tokens(kB * kT, c.vocab_size, 1), a_tg = test::tokens(kB * kT, c.vocab_size, 2);
    const auto b_in = test::tokens(kB * kT, c.vocab_size, 3), b_tg = test::tokens(kB * kT, c.vocab_size, 4);
    const MicroBatch a{a_in.data(), a_tg.data(), training(0)}, b{b_in.data(), b_tg.data(), training(2)};
    OwnedStage none(c, whole_model(c), {2, false, Recompute::none, 0, p});
    const float la = none.stage.forward(0, a), lb = none.stage.forward(1, b);
    none.stage.backward(1);
    none.stage.backward(0);
    size_t previous = none.stage.activation_bytes();
    // Each mode keeps less than the one before it: selective, full of the first block, full of all.
    for (const StageOptions opt : {StageOptions{2, false, Recompute::selective, 0, p},
                                   StageOptions{2, false, Recompute::full, 1, p},
                                   StageOptions{2, false, Recompute::full, 0, p}}) {
      const std::string where = "recompute " + std::to_string(static_cast<int>(opt.recompute)) + " of " +
                                std::to_string(opt.recompute_layers) + " blocks, vocab " +
                                std::to_string(c.vocab_size) + ", " + precision_name(p);
      OwnedStage re(c, whole_model(c), opt);
      // Two micro-batches in flight, so the shared recompute buffers serve both.
      EXPECT_EQ(re.stage.forward(0, a), la) << where;
      EXPECT_EQ(re.stage.forward(1, b), lb) << where;
      re.stage.backward(1);
      re.stage.backward(0);
      expect_same_tensors(re.layout, re.grads.data(), none.layout, none.grads.data(), where);
      EXPECT_LT(re.stage.activation_bytes(), previous) << where;
      previous = re.stage.activation_bytes();
    }
  }
}

TEST(Stage, SplitBackwardAddsBitwiseTheWholeBackwardsGradients) {
  ModelConfig untied = test::gpt2_like();
  untied.tie_embeddings = false;
  for (const Precision p : {Precision::fp32, Precision::bf16})
  for (const ModelConfig& c : {test::gpt2_like(), untied, test::llama_like()}) {
    std::vector<float> hidden(static_cast<size_t>(kB * kT * c.d_model)), dhidden(hidden.size());
    for (size_t i = 0; i < hidden.size(); ++i) {
      hidden[i] = std::sin(0.37f * static_cast<float>(i));
      dhidden[i] = 1e-3f * std::cos(0.11f * static_cast<float>(i));
    }
    const auto a_in = test::tokens(kB * kT, c.vocab_size, 1), a_tg = test::tokens(kB * kT, c.vocab_size, 2);
    const auto b_in = test::tokens(kB * kT, c.vocab_size, 3), b_tg = test::tokens(kB * kT, c.vocab_size, 4);
    const MicroBatch a{a_in.data(), a_tg.data(), training(0)}, b{b_in.data(), b_tg.data(), training(2)};
    for (const StageRange range : {whole_model(c), StageRange{1, 1, false, true}, StageRange{0, 1, true, false}}) {
      const std::string where = "vocab " + std::to_string(c.vocab_size) + " tied " +
                                std::to_string(c.tie_embeddings) + " blocks from " +
                                std::to_string(range.first_layer) + ", " + precision_name(p);
      OwnedStage whole(c, range, {2, false, Recompute::none, 0, p}), split(c, range, {2, true, Recompute::none, 0, p});
      const Shape rows{kB * kT, c.d_model};
      const Tensor x = range.embedding ? Tensor{} : Tensor(hidden.data(), rows);
      const Tensor dout = range.head ? Tensor{} : Tensor(dhidden.data(), rows);
      for (OwnedStage* st : {&whole, &split}) {
        st->stage.forward(0, a, x);
        st->stage.forward(1, b, x);
      }
      const auto values = [](Tensor t) {
        return t.data == nullptr ? std::vector<float>{} : std::vector<float>(t.f32(), t.f32() + t.numel());
      };
      const std::vector<float> want_a = values(whole.stage.backward(0, dout));
      whole.stage.backward(1, dout);
      EXPECT_EQ(values(split.stage.backward_input(0, dout)), want_a) << where;
      split.stage.backward_input(1, dout);
      split.stage.backward_weights(0);
      split.stage.backward_weights(1);
      expect_same_tensors(split.layout, split.grads.data(), whole.layout, whole.grads.data(), where);
      EXPECT_GT(split.stage.activation_bytes(), whole.stage.activation_bytes()) << where;
    }
  }
}

// Bytes of the tensors a bf16 stage of the whole model keeps in bf16 ([Note: activation dtype]),
// had they been float32, less their bf16 size: per block the two norm outputs, q/k/v, the attention
// output and the MLP's fc and act; the final norm output (the head's input without sequence
// parallelism); the scratch gradients at q/k/v and fc.
int64_t bytes_bf16_saves(const ModelConfig& c) {
  const LocalDims L = local_dims(c, TpCoord{});
  const int64_t N = int64_t{kB} * kT, C = c.d_model, D = c.head_dim();
  const int64_t qkv = N * (L.heads + 2 * L.kv_heads) * D, att = N * L.heads * D;
  const int64_t fc = N * (c.activation == ActivationKind::swiglu ? 2 : 1) * L.ffn, act = N * L.ffn;
  const auto saved = [](int64_t n) { return static_cast<int64_t>(Arena::aligned(4 * n) - Arena::aligned(2 * n)); };
  const int64_t block = 2 * saved(N * C) + saved(qkv) + saved(att) + saved(fc) + saved(act);
  return c.n_layers * block + saved(N * C) + saved(qkv) + saved(fc);
}

// Relative L2 distance of two equally long float ranges.
double rel_l2(const float* got, const float* want, int64_t n) {
  double diff = 0.0, norm = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff / norm);
}

// A bf16 stage keeps its GEMM-facing activations in bf16 — exactly the tensors of bytes_bf16_saves,
// in half their float32 bytes — and computes the float32 stage's loss and gradients within bf16's
// rounding: the loss within 0.5 %, every parameter tensor's gradient within 2 % (relative L2;
// measured 0.13 %–0.8 %: each activation is rounded once to 2^-9 relative and the GEMMs multiply
// bf16 weights) but not equal to it (the rounding is on). fp32, fp16 and context-parallel stages
// keep float32 activations.
TEST(Stage, Bf16ActivationsHalveTheirBytesAndTrainLikeFloat32) {
  EXPECT_EQ(activation_dtype(Precision::fp16, Device::cpu, 1).dtype, DType::f32);
  EXPECT_EQ(activation_dtype(Precision::bf16, Device::cuda, 1).dtype, DType::f32);
  EXPECT_EQ(activation_dtype(Precision::bf16, Device::cpu, 2).dtype, DType::f32);
  EXPECT_EQ(activation_dtype(Precision::bf16, Device::cpu, 1, false).dtype, DType::f32);  // train.bf16_activations
  EXPECT_EQ(activation_dtype(Precision::bf16, Device::cpu, 1).dtype, DType::bf16);
  for (const ModelConfig& c : {test::gpt2_like(), test::llama_like()}) {
    const std::string what = c.norm == NormKind::rmsnorm ? "llama-like" : "gpt2-like";
    const auto in = test::tokens(kB * kT, c.vocab_size, 1), tg = test::tokens(kB * kT, c.vocab_size, 2);
    const MicroBatch mb{in.data(), tg.data(), training(0)};
    OwnedStage fp32(c, whole_model(c), {1}), bf16(c, whole_model(c), {1, false, Recompute::none, 0, Precision::bf16});
    EXPECT_EQ(fp32.stage.activation_dtype(), DType::f32);
    ASSERT_EQ(bf16.stage.activation_dtype(), DType::bf16);
    EXPECT_EQ(static_cast<int64_t>(fp32.stage.activation_bytes() - bf16.stage.activation_bytes()), bytes_bf16_saves(c))
        << what;
    const float want = fp32.stage.forward(0, mb), got = bf16.stage.forward(0, mb);
    EXPECT_NEAR(got, want, 5e-3 * want) << what;
    fp32.stage.backward(0);
    bf16.stage.backward(0);
    bool differs = got != want;
    for (size_t i = 0; i < fp32.layout.size(); ++i) {
      const int64_t at = fp32.layout.offset(i), n = fp32.layout.local_shape(i).numel();
      const double err = rel_l2(bf16.grads.data() + at, fp32.grads.data() + at, n);
      EXPECT_LT(err, 0.02) << what << ": " << fp32.layout.spec(i).name;
      differs |= err > 0.0;
    }
    EXPECT_TRUE(differs) << what << ": the bf16 stage computed the float32 one's values to the last bit";
  }
}

}  // namespace
}  // namespace megatrain
