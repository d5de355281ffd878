// dump_gpt_case FAMILY OUTDIR: runs the single-process GptModel (model/gpt.h) and AdamW
// (optim/adamw.h) on one tiny case of FAMILY (gpt2 or llama, tests/model/tiny_models.h with
// dropout 0 and init_std 0.2) and writes everything that tests/reference/gpt_reference.py
// recomputes in float64:
//   manifest.json                 config, B, T, every parameter's name / global shape / valid rows,
//                                 the two AdamW option sets and the learning rates of the two steps
//   inputs.i32, targets.i32       (B, T) token ids
//   s0/, s1/                      model state k: params/NAME.f32, logits.f32 (B·T, Vp; forward with
//                                 LossGrad::none), loss.f32 (the mean loss), grads/NAME.f32 (forward
//                                 with LossGrad::in_place, dloss_scale = 1/(B·T), then backward)
//   OPT/stepK/                    optimizer OPT after step K: params/, exp_avg/, exp_avg_sq/ NAME.f32
// State s0 is init(seed); s1 is s0 after step 1 of optimizer "adamw" on s0's gradient. Both
// optimizers take the same two gradients: step 1 s0's, step 2 s1's (recomputed at s1, so the
// gradient check also runs where norm weights are not 1 and biases not 0). Invariant: every
// tensor is written whole (padded vocabulary rows included) as raw little-endian float32/int32,
// and both gradient norms exceed grad_clip, so clipping really scales (checked, not assumed).
#include <nlohmann/json.hpp>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "tests/model/tiny_models.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kBatch = 2, kSeq = 11;  // T < max_seq_len (16): the unused position rows get no gradient
constexpr uint64_t kSeed = 20240917;
constexpr float kLr[2] = {3e-3f, 2e-3f};  // learning rate of step 1 and step 2

struct NamedOptions {
  std::string name;
  AdamWOptions opt;
};

// Two option sets: the default decay groups (matrices only) and every group decayed. eps is
// raised to the size of the smaller gradients' √v̂ so that where ε is added is visible.
std::vector<NamedOptions> optimizer_cases() {
  AdamWOptions a;
  a.beta1 = 0.8f;
  a.beta2 = 0.9f;
  a.eps = 1e-5f;
  a.weight_decay = 0.25f;
  a.grad_clip = 0.5f;
  AdamWOptions b = a;
  b.decay_embeddings = true;
  b.decay_norms_and_biases = true;
  return {{"adamw", a}, {"adamw_decay_all", b}};
}

ModelConfig family_config(const std::string& family) {
  MT_CHECK(family == "gpt2" || family == "llama", "family must be gpt2 or llama, got '{}'", family);
  ModelConfig c = family == "gpt2" ? test::gpt2_like() : test::llama_like();
  c.dropout = 0.0f;
  // Weights of a trained model's size rather than 0.02, so attention, GELU / SiLU and the softmax
  // run in their nonlinear range (at 0.02 the scores are near-uniform, the q and k gradients ~100x
  // below v's, and GELU's cubic term changes the gradient by ~1e-4 only).
  c.init_std = 0.2f;
  return c;
}

const char* norm_name(NormKind k) { return k == NormKind::layernorm ? "layernorm" : "rmsnorm"; }
const char* position_name(PositionKind k) { return k == PositionKind::learned ? "learned" : "rope"; }
const char* activation_name(ActivationKind k) { return k == ActivationKind::gelu ? "gelu" : "swiglu"; }

void write_raw(const fs::path& path, const void* data, size_t bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  MT_CHECK(f.good(), "cannot write {}", path.string());
}

// Each parameter of `layout` in the buffer `base` (flat layout offsets) as DIR/NAME.f32.
void write_tensors(const fs::path& dir, const ParamLayout& layout, const float* base) {
  for (size_t i = 0; i < layout.size(); ++i) {
    const ParamSpec& s = layout.spec(i);
    write_raw(dir / (s.name + ".f32"), base + layout.offset(i), sizeof(float) * static_cast<size_t>(s.shape.numel()));
  }
}

json config_json(const ModelConfig& c) {
  return {{"n_layers", c.n_layers},
          {"d_model", c.d_model},
          {"n_heads", c.n_heads},
          {"n_kv_heads", c.kv_heads()},
          {"d_ff", c.ffn_dim()},
          {"vocab_size", c.vocab_size},
          {"padded_vocab", c.padded_vocab(1)},
          {"max_seq_len", c.max_seq_len},
          {"norm", norm_name(c.norm)},
          {"position", position_name(c.position)},
          {"activation", activation_name(c.activation)},
          {"bias", c.bias},
          {"tie_embeddings", c.tie_embeddings},
          {"norm_eps", static_cast<double>(c.norm_eps)},
          {"rope_theta", static_cast<double>(c.rope_theta)}};
}

json options_json(const NamedOptions& o) {
  const AdamWOptions& a = o.opt;
  return {{"name", o.name},
          {"beta1", static_cast<double>(a.beta1)},
          {"beta2", static_cast<double>(a.beta2)},
          {"eps", static_cast<double>(a.eps)},
          {"weight_decay", static_cast<double>(a.weight_decay)},
          {"grad_clip", static_cast<double>(a.grad_clip)},
          {"decay_embeddings", a.decay_embeddings},
          {"decay_norms_and_biases", a.decay_norms_and_biases},
          {"lr", {static_cast<double>(kLr[0]), static_cast<double>(kLr[1])}}};
}

json manifest(const std::string& family, const ModelConfig& cfg, const ParamLayout& layout,
              const std::vector<NamedOptions>& opts, const std::vector<double>& grad_norms) {
  json params = json::array();
  for (size_t i = 0; i < layout.size(); ++i) {
    const ParamSpec& s = layout.spec(i);
    json shape = json::array();
    for (int d = 0; d < s.shape.ndim; ++d) shape.push_back(s.shape[d]);
    // valid_rows: rows at and beyond it are vocabulary padding (their logits are excluded).
    const int64_t valid_rows = s.valid_rows < 0 ? s.shape[0] : s.valid_rows;
    params.push_back({{"name", s.name}, {"shape", shape}, {"valid_rows", valid_rows}});
  }
  json optimizers = json::array();
  for (const auto& o : opts) optimizers.push_back(options_json(o));
  return {{"family", family},
          {"config", config_json(cfg)},
          {"B", kBatch},
          {"T", kSeq},
          {"seed", kSeed},
          {"dtype", "little-endian float32 (*.f32), int32 (*.i32)"},
          {"logits_shape", {kBatch * kSeq, cfg.padded_vocab(1)}},
          {"logits_valid_columns", cfg.vocab_size},
          {"params", params},
          {"states", {"s0", "s1"}},
          {"state_note", "s0 = init(seed); s1 = optimizer 'adamw' after step 1 from s0"},
          {"optimizers", optimizers},
          {"optimizer_grads", "step 1 uses s0/grads, step 2 uses s1/grads (recomputed at s1)"},
          {"grad_norms", grad_norms}};
}

// Logits, loss and gradient of the model's current parameters into DIR.
void dump_state(const fs::path& dir, GptModel& model, const std::vector<int32_t>& inputs,
                const std::vector<int32_t>& targets) {
  const ParamLayout& layout = model.layout();
  write_tensors(dir / "params", layout, model.params());
  ForwardOptions eval;
  eval.grad = LossGrad::none;
  const float loss = model.forward(inputs.data(), targets.data(), eval);
  const Tensor logits = model.logits();
  write_raw(dir / "logits.f32", logits.f32(), logits.bytes());
  write_raw(dir / "loss.f32", &loss, sizeof(loss));
  ForwardOptions train;
  train.grad = LossGrad::in_place;
  train.dloss_scale = 1.0f / static_cast<float>(kBatch * kSeq);
  model.zero_grads();
  const float train_loss = model.forward(inputs.data(), targets.data(), train);
  MT_CHECK(train_loss == loss, "training forward loss {} differs from the evaluation loss {}", train_loss, loss);
  model.backward();
  write_tensors(dir / "grads", layout, model.grads());
}

void run(const std::string& family, const fs::path& out) {
  static_assert(std::endian::native == std::endian::little, "the dump format is little-endian");
  const ModelConfig cfg = family_config(family);
  GptModel model(cfg, kBatch, kSeq);
  model.init(kSeed);
  const ParamLayout& layout = model.layout();
  const int n = kBatch * kSeq;
  const std::vector<int32_t> inputs = test::tokens(n, cfg.vocab_size, 1);
  const std::vector<int32_t> targets = test::tokens(n, cfg.vocab_size, 2);
  write_raw(out / "inputs.i32", inputs.data(), sizeof(int32_t) * inputs.size());
  write_raw(out / "targets.i32", targets.data(), sizeof(int32_t) * targets.size());

  const std::vector<NamedOptions> opts = optimizer_cases();
  std::vector<AdamW> adam;
  std::vector<std::vector<float>> theta;  // each optimizer's parameters
  const size_t total = static_cast<size_t>(layout.total());
  for (const auto& o : opts) {
    adam.emplace_back(layout, o.opt);
    theta.emplace_back(model.params(), model.params() + total);
  }
  std::vector<double> grad_norms;
  for (int step = 0; step < 2; ++step) {
    const std::string state = "s" + std::to_string(step);
    dump_state(out / state, model, inputs, targets);
    const double norm = grad_norm(Stream::cpu(), {GradPart(model.grads(), layout.total())});
    grad_norms.push_back(norm);
    for (size_t k = 0; k < opts.size(); ++k) {
      MT_CHECK(norm > opts[k].opt.grad_clip, "{}: gradient norm {} of {} is not above grad_clip {}: clipping untested",
               family, norm, state, opts[k].opt.grad_clip);
      adam[k].step(theta[k].data(), model.grads(), kLr[step], norm);
      const fs::path dir = out / opts[k].name / ("step" + std::to_string(step + 1));
      write_tensors(dir / "params", layout, theta[k].data());
      write_tensors(dir / "exp_avg", layout, adam[k].exp_avg());
      write_tensors(dir / "exp_avg_sq", layout, adam[k].exp_avg_sq());
    }
    // The model moves along optimizer 0's trajectory: s1 = its parameters after step 1.
    std::memcpy(model.params(), theta[0].data(), sizeof(float) * total);
  }
  std::ofstream(out / "manifest.json") << manifest(family, cfg, layout, opts, grad_norms).dump(2) << "\n";
}

}  // namespace
}  // namespace megatrain

int main(int argc, char** argv) {
  if (argc != 3) {
    fmt::print(stderr, "usage: {} gpt2|llama OUTDIR\n", argv[0]);
    return 2;
  }
  try {
    megatrain::run(argv[1], argv[2]);
  } catch (const std::exception& e) {
    fmt::print(stderr, "dump_gpt_case: {}\n", e.what());
    return 1;
  }
  return 0;
}
