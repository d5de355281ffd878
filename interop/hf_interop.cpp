// Hugging Face interop: the family rules, the tensor table, and the walks over it in both directions
// (config.json is read and written in hf_config.cpp). [Note: HF tensor table] Every HF tensor is a
// block of whole rows of one of our parameters, possibly transposed: GPT-2's Conv1D stores (in,
// out), Llama's q/k/v and gate/up are row ranges of our fused qkv and fc weights, Mixtral's expert
// i's w1 (gate) / w3 (up) and w2 are row ranges of the (E·2Fe, C) and (E·C, Fe) views of our
// expert tensors, the embedding and an untied head drop the padded vocabulary rows. Our RoPE is
// HF's rotate-half on HF's head layout, so q and k need no permutation.
#include "interop/hf_interop.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "kernels/check.h"
#include "kernels/ops.h"

namespace megatrain {
namespace fs = std::filesystem;
namespace {

// Each constraint of a family that `m` fails, as the setting it would need.
std::vector<std::string> gpt2_failures(const ModelConfig& m) {
  std::vector<std::string> f;
  if (m.norm != NormKind::layernorm) f.emplace_back("model.norm = \"layernorm\"");
  if (m.position != PositionKind::learned) f.emplace_back("model.position = \"learned\"");
  if (m.activation != ActivationKind::gelu) f.emplace_back("model.activation = \"gelu\"");
  if (!m.bias) f.emplace_back("model.bias = true");
  if (!m.tie_embeddings) f.emplace_back("model.tie_embeddings = true");
  if (m.kv_heads() != m.n_heads) f.emplace_back("model.n_kv_heads = n_heads (no grouped-query attention)");
  return f;
}

std::vector<std::string> llama_failures(const ModelConfig& m) {
  std::vector<std::string> f;
  if (m.norm != NormKind::rmsnorm) f.emplace_back("model.norm = \"rmsnorm\"");
  if (m.position != PositionKind::rope) f.emplace_back("model.position = \"rope\"");
  if (m.activation != ActivationKind::swiglu) f.emplace_back("model.activation = \"swiglu\"");
  if (m.bias) f.emplace_back("model.bias = false");
  return f;
}

// Llama's arithmetic without its qkv rule: Llama has no bias on q/k/v, Qwen2 has one.
std::vector<std::string> llama_family_failures(const ModelConfig& m, bool qkv_bias) {
  std::vector<std::string> f = llama_failures(m);
  if (m.qkv_bias != qkv_bias) f.push_back(fmt::format("model.qkv_bias = {}", qkv_bias));
  return f;
}

// Mixtral is Llama with every MLP replaced by transformers' MixtralSparseMoeBlock, which routes by
// softmax over all experts, takes the top k and renormalises their k gates, and has nothing beside
// the routed experts. That is megatrain's softmax router for k ≥ 2 only: at k = 1 megatrain's gate
// is the expert's probability (Switch), Mixtral's renormalised gate is 1.
std::vector<std::string> mixtral_failures(const ModelConfig& m) {
  std::vector<std::string> f = llama_family_failures(m, false);
  if (m.rope_scaling.kind != RopeScaling::none) f.emplace_back("model.rope_scaling = \"none\"");
  std::vector<int> dense;
  for (int l = 0; l < m.n_layers; ++l)
    if (!m.moe.is_moe_layer(l)) dense.push_back(l);
  if (!dense.empty())
    f.push_back(
        fmt::format("moe.layers = 1 or a list of every block (Mixtral has no dense blocks; dense here: "
                    "blocks {})",
                    fmt::join(dense, ", ")));
  if (m.moe.router != RouterKind::softmax) f.emplace_back("moe.router = \"softmax\"");
  if (m.moe.top_k < 2)
    f.emplace_back("moe.top_k >= 2 (Mixtral renormalises the chosen gates, so its top-1 gate is always 1)");
  if (m.moe.n_shared_experts != 0) f.emplace_back("moe.n_shared_experts = 0");
  if (m.moe.residual) f.emplace_back("moe.residual = false");
  if (m.moe.aux_free_bias != 0.0f) f.emplace_back("moe.aux_free_bias = 0 (Mixtral routes on the router scores alone)");
  return f;
}

// Elements in one row of parameter SPEC viewed as (numel / last dim, last dim): 1 for a vector, the
// last dimension otherwise, so the rows of an expert tensor run through all its experts.
int64_t row_width(const ParamSpec& spec) { return spec.shape.ndim == 1 ? 1 : spec.shape[spec.shape.ndim - 1]; }

// Where entry T's block starts in PARAMS; checks the table against the layout (a bug if it fails).
template <class F>
F* block_of(F* params, const ParamLayout& layout, const HfTensorMap& t) {
  const size_t i = layout.index_of(t.ours);
  const ParamSpec& spec = layout.spec(i);
  const int64_t width = row_width(spec);
  MT_CHECK(width == std::max<int64_t>(t.cols, 1) && t.row0 >= 0 && t.row0 + t.rows <= spec.shape.numel() / width,
           "HF tensor {} does not fit parameter {} {}", t.hf_name, t.ours, spec.shape.str());
  return params + layout.offset(i) + t.row0 * width;
}

std::string shape_text(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

bool ignorable(const std::string& name, const ModelConfig& m) {
  // Buffers older transformers saved (GPT-2's causal mask, Llama's RoPE frequencies), and the head a
  // tied model may carry as a copy of the embedding.
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") || name.ends_with("rotary_emb.inv_freq") ||
         (m.tie_embeddings && name == "lm_head.weight");
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  MT_DATA_CHECK(in.good(), "{}: cannot be opened; a Hugging Face model folder holds config.json and model.safetensors",
                path.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("{}: not valid JSON ({})", path.string(), e.what()));
  }
}

}  // namespace

const char* hf_architecture(HfFamily family) {
  switch (family) {
    case HfFamily::gpt2:
      return "GPT2LMHeadModel";
    case HfFamily::llama:
      return "LlamaForCausalLM";
    case HfFamily::qwen2:
      return "Qwen2ForCausalLM";
    case HfFamily::mixtral:
      return "MixtralForCausalLM";
  }
  throw Error("unknown HfFamily");
}

HfFamily hf_family(const ModelConfig& m, const std::string& source) {
  if (m.moe.enabled()) {
    const auto mixtral = mixtral_failures(m);
    if (mixtral.empty()) return HfFamily::mixtral;
    throw DataError(
        fmt::format("{}: this MoE model has no Hugging Face equivalent: as Mixtral (MixtralForCausalLM) "
                    "it would need {}",
                    source, fmt::join(mixtral, ", ")));
  }
  const auto gpt2 = gpt2_failures(m), llama = llama_family_failures(m, false), qwen2 = llama_family_failures(m, true);
  if (gpt2.empty()) return HfFamily::gpt2;
  if (llama.empty()) return HfFamily::llama;
  if (qwen2.empty()) return HfFamily::qwen2;
  throw DataError(fmt::format(
      "{}: this model has no Hugging Face equivalent: as GPT-2 (GPT2LMHeadModel) it would need {}; as Llama "
      "(LlamaForCausalLM) it would need {}; as Qwen2 (Qwen2ForCausalLM) it would need {}",
      source, fmt::join(gpt2, ", "), fmt::join(llama, ", "), fmt::join(qwen2, ", ")));
}

std::vector<int64_t> HfTensorMap::hf_shape() const {
  if (cols == 0) return {rows};
  return transpose ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{rows, cols};
}

std::vector<HfTensorMap> hf_tensor_map(const ModelConfig& m, HfFamily family) {
  const int64_t C = m.d_model, D = m.head_dim(), H = m.n_heads, Hkv = m.kv_heads(), F = m.ffn_dim();
  const int64_t V = m.vocab_size, E = m.moe.n_experts, Fe = m.expert_ffn_dim();
  std::vector<HfTensorMap> t;
  auto add = [&](std::string hf, std::string ours, int64_t row0, int64_t rows, int64_t cols, bool transpose) {
    t.push_back({std::move(hf), std::move(ours), row0, rows, cols, transpose});
  };
  if (family == HfFamily::gpt2) {
    // Conv1D: y = x·W + b with W (in, out), the transpose of our (out, in).
    auto conv = [&](const std::string& hf, const std::string& ours, int64_t out, int64_t in) {
      add(hf + ".weight", ours + ".weight", 0, out, in, true);
      add(hf + ".bias", ours + ".bias", 0, out, 0, false);
    };
    auto norm = [&](const std::string& hf, const std::string& ours) {
      add(hf + ".weight", ours + ".weight", 0, C, 0, false);
      add(hf + ".bias", ours + ".bias", 0, C, 0, false);
    };
    add("transformer.wte.weight", "embed.wte", 0, V, C, false);
    add("transformer.wpe.weight", "embed.wpe", 0, m.max_seq_len, C, false);
    for (int l = 0; l < m.n_layers; ++l) {
      const std::string h = fmt::format("transformer.h.{}.", l), L = fmt::format("layers.{}.", l);
      norm(h + "ln_1", L + "attn_norm");
      conv(h + "attn.c_attn", L + "attn.qkv", 3 * C, C);  // [q | k | v], heads in order: HF's split
      conv(h + "attn.c_proj", L + "attn.proj", C, C);
      norm(h + "ln_2", L + "mlp_norm");
      conv(h + "mlp.c_fc", L + "mlp.fc", F, C);
      conv(h + "mlp.c_proj", L + "mlp.proj", C, F);
    }
    norm("transformer.ln_f", "final_norm");
    return t;
  }
  add("model.embed_tokens.weight", "embed.wte", 0, V, C, false);
  for (int l = 0; l < m.n_layers; ++l) {
    const std::string h = fmt::format("model.layers.{}.", l), L = fmt::format("layers.{}.", l);
    add(h + "input_layernorm.weight", L + "attn_norm.weight", 0, C, 0, false);
    add(h + "self_attn.q_proj.weight", L + "attn.qkv.weight", 0, H * D, C, false);
    add(h + "self_attn.k_proj.weight", L + "attn.qkv.weight", H * D, Hkv * D, C, false);
    add(h + "self_attn.v_proj.weight", L + "attn.qkv.weight", (H + Hkv) * D, Hkv * D, C, false);
    if (family == HfFamily::qwen2) {
      add(h + "self_attn.q_proj.bias", L + "attn.qkv.bias", 0, H * D, 0, false);
      add(h + "self_attn.k_proj.bias", L + "attn.qkv.bias", H * D, Hkv * D, 0, false);
      add(h + "self_attn.v_proj.bias", L + "attn.qkv.bias", (H + Hkv) * D, Hkv * D, 0, false);
    }
    add(h + "self_attn.o_proj.weight", L + "attn.proj.weight", 0, C, H * D, false);
    add(h + "post_attention_layernorm.weight", L + "mlp_norm.weight", 0, C, 0, false);
    if (family != HfFamily::mixtral) {
      add(h + "mlp.gate_proj.weight", L + "mlp.fc.weight", 0, F, C, false);  // fc = [gate | up]
      add(h + "mlp.up_proj.weight", L + "mlp.fc.weight", F, F, C, false);
      add(h + "mlp.down_proj.weight", L + "mlp.proj.weight", 0, C, F, false);
      continue;
    }
    // Expert i's fc is rows [i·2Fe, (i+1)·2Fe) of the (E·2Fe, C) view, [gate | up] as the dense fc;
    // its proj rows [i·C, (i+1)·C) of the (E·C, Fe) view. MixtralBlockSparseTop2MLP computes
    // w2(silu(w1·x) ⊙ w3·x): w1 is the gate, w3 the up projection.
    add(h + "block_sparse_moe.gate.weight", L + "moe.router.weight", 0, E, C, false);
    for (int64_t i = 0; i < E; ++i) {
      const std::string x = fmt::format("{}block_sparse_moe.experts.{}.", h, i);
      add(x + "w1.weight", L + "moe.experts.fc.weight", i * 2 * Fe, Fe, C, false);
      add(x + "w2.weight", L + "moe.experts.proj.weight", i * C, C, Fe, false);
      add(x + "w3.weight", L + "moe.experts.fc.weight", i * 2 * Fe + Fe, Fe, C, false);
    }
  }
  add("model.norm.weight", "final_norm.weight", 0, C, 0, false);
  if (!m.tie_embeddings) add("lm_head.weight", "lm_head.weight", 0, V, C, false);
  return t;
}

void hf_export(const std::string& out_dir, const ModelConfig& m, const float* params, const std::string& source,
               Precision dtype) {
  const HfFamily family = hf_family(m, source);
  const ParamLayout layout = gpt_param_layout(m);
  const std::vector<HfTensorMap> map = hf_tensor_map(m, family);
  std::vector<std::vector<float>> transposed;  // the only float32 copies: untransposed blocks are views
  transposed.reserve(map.size());
  std::vector<std::vector<uint16_t>> rounded(map.size());  // bf16 / fp16 exports
  std::vector<SafeTensorRef> refs;
  for (const HfTensorMap& t : map) {
    const float* block = block_of(params, layout, t);
    const int64_t width = std::max<int64_t>(t.cols, 1), n = t.rows * width;
    if (t.transpose) {
      std::vector<float>& out = transposed.emplace_back(static_cast<size_t>(n));
      for (int64_t r = 0; r < t.rows; ++r)
        for (int64_t c = 0; c < width; ++c) out[static_cast<size_t>(c * t.rows + r)] = block[r * width + c];
      block = out.data();
    }
    if (dtype == Precision::fp32) {
      refs.push_back({t.hf_name, "F32", t.hf_shape(), block, static_cast<size_t>(n) * sizeof(float)});
      continue;
    }
    std::vector<uint16_t>& bits = rounded[refs.size()];
    bits.resize(static_cast<size_t>(n));
    convert(Stream::cpu(), Tensor(bits.data(), Shape{n}, dtype_of(dtype)), Tensor(const_cast<float*>(block), Shape{n}));
    refs.push_back({t.hf_name, dtype == Precision::bf16 ? "BF16" : "F16", t.hf_shape(), bits.data(),
                    static_cast<size_t>(n) * sizeof(uint16_t)});
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  MT_DATA_CHECK(!ec, "{}: cannot create the output folder ({}); check --out", out_dir, ec.message());
  // transformers refuses safetensors files whose metadata does not name the framework.
  safetensors_write((fs::path(out_dir) / "model.safetensors").string(), refs, {{"format", "pt"}});
  const fs::path config = fs::path(out_dir) / "config.json", tmp = config.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << hf_config_json(m, family, dtype).dump(2) << "\n";
    MT_DATA_CHECK(out.good(), "{}: cannot be written; check --out", tmp.string());
  }
  fs::rename(tmp, config, ec);
  MT_DATA_CHECK(!ec, "{}: cannot be renamed to config.json ({})", tmp.string(), ec.message());
}

HfWeights HfWeights::open(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors", index = fs::path(dir) / "model.safetensors.index.json";
  std::vector<fs::path> paths;
  HfWeights w;
  if (fs::exists(single)) {
    paths.push_back(single);
    w.source_ = single.string();
  } else if (fs::exists(index)) {
    w.source_ = index.string();
    const nlohmann::json j = read_json(index);
    MT_DATA_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), "{}: no \"weight_map\" object", w.source_);
    std::set<std::string> files;
    for (const auto& [name, file] : j["weight_map"].items()) {
      MT_DATA_CHECK(file.is_string(), "{}: weight_map[\"{}\"] must be a file name", w.source_, name);
      files.insert(file.get<std::string>());
    }
    for (const std::string& f : files) paths.push_back(fs::path(dir) / f);
  } else {
    throw DataError(
        fmt::format("{}: holds neither model.safetensors nor model.safetensors.index.json; save the "
                    "model with save_pretrained(…, safe_serialization=True)",
                    dir));
  }
  for (const fs::path& p : paths) {
    w.files_.push_back(SafetensorsFile::open(p.string()));
    for (const std::string& name : w.files_.back().names()) {
      const auto [it, fresh] = w.where_.emplace(name, w.files_.size() - 1);
      MT_DATA_CHECK(fresh, "{}: tensor '{}' is in both {} and {}", w.source_, name, w.files_[it->second].path(),
                    p.string());
    }
  }
  return w;
}

const TensorInfo* HfWeights::find(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : &files_[it->second].info(name);
}

const std::string& HfWeights::file_of(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? source_ : files_[it->second].path();
}

void HfWeights::read_f32(const std::string& name, std::span<float> out) const {
  auto it = where_.find(name);
  MT_DATA_CHECK(it != where_.end(), "{}: tensor '{}' is missing", source_, name);
  files_[it->second].read_f32(name, out);
}

std::vector<std::string> HfWeights::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : where_) out.push_back(name);
  return out;
}

HfImport hf_import(const std::string& dir) {
  const fs::path config_path = fs::path(dir) / "config.json";
  HfImport r;
  r.model = hf_model_config(read_json(config_path), config_path.string());
  const HfFamily family = hf_family(r.model, config_path.string());
  r.layout = gpt_param_layout(r.model);
  r.params = FlatBuffer(r.layout.total());
  const HfWeights w = HfWeights::open(dir);
  // A GPT-2 saved from GPT2Model (as the original "gpt2" upload) has no "transformer." prefix.
  const std::string prefix = "transformer.";
  const bool strip = family == HfFamily::gpt2 && !w.find(prefix + "wte.weight") && w.find("wte.weight");
  std::set<std::string> used;
  for (const HfTensorMap& t : hf_tensor_map(r.model, family)) {
    const std::string name = strip ? t.hf_name.substr(prefix.size()) : t.hf_name;
    const TensorInfo* info = w.find(name);
    MT_DATA_CHECK(info, "{}: tensor '{}' is missing; {} describes a {} that needs it", w.source(), name,
                  config_path.string(), hf_architecture(family));
    MT_DATA_CHECK(info->shape == t.hf_shape(), "{}: tensor '{}' has shape {}, but {} implies {}", w.file_of(name), name,
                  shape_text(info->shape), config_path.string(), shape_text(t.hf_shape()));
    float* block = block_of(r.params.data(), r.layout, t);
    const int64_t width = std::max<int64_t>(t.cols, 1), n = t.rows * width;
    if (!t.transpose) {
      w.read_f32(name, std::span<float>(block, static_cast<size_t>(n)));
    } else {
      std::vector<float> in(static_cast<size_t>(n));
      w.read_f32(name, in);
      for (int64_t r0 = 0; r0 < t.rows; ++r0)
        for (int64_t c = 0; c < width; ++c) block[r0 * width + c] = in[static_cast<size_t>(c * t.rows + r0)];
    }
    used.insert(name);
  }
  std::vector<std::string> extra;
  for (const std::string& name : w.names())
    if (!used.count(name) && !ignorable(name, r.model)) extra.push_back(name);
  MT_DATA_CHECK(extra.empty(),
                "{}: unexpected tensors {}{}: {} describes a {} without them; megatrain cannot import a model "
                "with extra parts",
                w.source(), fmt::join(extra.begin(), extra.begin() + std::min<size_t>(extra.size(), 5), ", "),
                extra.size() > 5 ? fmt::format(" and {} more", extra.size() - 5) : "", config_path.string(),
                hf_architecture(family));
  return r;
}

}  // namespace megatrain
