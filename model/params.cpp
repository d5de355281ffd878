#include "model/params.h"

#include <cmath>
#include <cstring>

#include "kernels/rng.h"

namespace megatrain {

ParamLayout::ParamLayout(std::vector<ParamSpec> specs) : specs_(std::move(specs)) {
  for (const auto& s : specs_) {
    offsets_.push_back(total_);
    total_ += (s.shape.numel() + 15) / 16 * 16;
  }
}

int64_t ParamLayout::num_parameters() const {
  int64_t n = 0;
  for (const auto& s : specs_) n += s.shape.numel();
  return n;
}

size_t ParamLayout::index_of(const std::string& name) const {
  for (size_t i = 0; i < specs_.size(); ++i)
    if (specs_[i].name == name) return i;
  throw Error(fmt::format("no parameter named '{}'", name));
}

bool ParamLayout::contains(const std::string& name) const {
  for (const auto& s : specs_)
    if (s.name == name) return true;
  return false;
}

ParamLayout gpt_param_layout(const ModelConfig& cfg) {
  const int64_t C = cfg.d_model, D = cfg.head_dim(), H = cfg.n_heads, Hkv = cfg.kv_heads();
  const int64_t F = cfg.ffn_dim(), Vp = cfg.padded_vocab();
  const int64_t fc_out = cfg.activation == ActivationKind::swiglu ? 2 * F : F;
  std::vector<ParamSpec> p;
  auto norm = [&](const std::string& prefix) {
    p.push_back({prefix + ".weight", Shape{C}, -1, ParamGroup::norm, InitKind::ones});
    if (cfg.bias && cfg.norm == NormKind::layernorm)
      p.push_back({prefix + ".bias", Shape{C}, -1, ParamGroup::bias, InitKind::zeros});
  };
  auto linear = [&](const std::string& prefix, int64_t out, int64_t in, int split, InitKind init) {
    p.push_back({prefix + ".weight", Shape{out, in}, split, ParamGroup::matrix, init});
    if (cfg.bias) p.push_back({prefix + ".bias", Shape{out}, split == 0 ? 0 : -1, ParamGroup::bias, InitKind::zeros});
  };
  p.push_back({"embed.wte", Shape{Vp, C}, 0, ParamGroup::embedding, InitKind::normal, cfg.vocab_size});
  if (cfg.position == PositionKind::learned)
    p.push_back({"embed.wpe", Shape{cfg.max_seq_len, C}, -1, ParamGroup::embedding, InitKind::normal});
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string L = "layers." + std::to_string(l);
    norm(L + ".attn_norm");
    linear(L + ".attn.qkv", (H + 2 * Hkv) * D, C, 0, InitKind::normal);
    linear(L + ".attn.proj", C, H * D, 1, InitKind::normal_residual);
    norm(L + ".mlp_norm");
    linear(L + ".mlp.fc", fc_out, C, 0, InitKind::normal);
    linear(L + ".mlp.proj", C, F, 1, InitKind::normal_residual);
  }
  norm("final_norm");
  if (!cfg.tie_embeddings)
    p.push_back({"lm_head.weight", Shape{Vp, C}, 0, ParamGroup::matrix, InitKind::normal, cfg.vocab_size});
  return ParamLayout(std::move(p));
}

void init_params(const ParamLayout& layout, float* params, const ModelConfig& cfg, uint64_t seed) {
  init_params_range(layout, params, FlatRange{0, layout.total()}, cfg, seed);
}

void init_params_range(const ParamLayout& layout, float* data, FlatRange range, const ModelConfig& cfg, uint64_t seed) {
  const float residual_std = cfg.init_std / std::sqrt(2.0f * static_cast<float>(cfg.n_layers));
  for (size_t i = 0; i < layout.size(); ++i) {
    const ParamSpec& s = layout.spec(i);
    const int64_t off = layout.offset(i), n = s.shape.numel();
    const FlatRange mine = flat_intersect(range, FlatRange{off, off + n});
    float* w = data + (mine.begin - range.begin);
    const int64_t first = mine.begin - off;  // element index inside the tensor
    if (s.init == InitKind::ones || s.init == InitKind::zeros) {
      const float v = s.init == InitKind::ones ? 1.0f : 0.0f;
      for (int64_t e = 0; e < mine.size(); ++e) w[e] = v;
      continue;
    }
    const float std = s.init == InitKind::normal_residual ? residual_std : cfg.init_std;
    const RngKey key{seed, static_cast<uint32_t>(RngPurpose::init), static_cast<uint32_t>(i), 0};
    const int64_t valid = s.valid_rows < 0 ? n : s.valid_rows * (n / s.shape[0]);
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < mine.size(); ++e) {
      const int64_t idx = first + e;
      w[e] = idx < valid ? rng_normal(key, static_cast<uint64_t>(idx)) * std : 0.0f;
    }
  }
}

std::vector<FlatRange> gpt_param_units(const ParamLayout& layout, const ModelConfig& cfg) {
  std::vector<int64_t> starts{0};
  for (int l = 0; l < cfg.n_layers; ++l)
    starts.push_back(layout.offset(layout.index_of("layers." + std::to_string(l) + ".attn_norm.weight")));
  starts.push_back(layout.offset(layout.index_of("final_norm.weight")));
  starts.push_back(layout.total());
  std::vector<FlatRange> units;
  for (size_t u = 0; u + 1 < starts.size(); ++u) units.push_back({starts[u], starts[u + 1]});
  return units;
}

}  // namespace megatrain
