// config.json ↔ ModelConfig for the Hugging Face families (hf_interop.h). Export writes the keys
// transformers' GPT2Config / LlamaConfig / MixtralConfig / Qwen2Config read; import reads them back,
// defaults what transformers would default, and refuses every option that changes the model's
// arithmetic in a way megatrain's layers do not (another activation, a RoPE scaling other than
// linear / llama3 / yarn, biases in Llama, scaled GPT-2 attention, a sliding window that binds, …). Invariant: hf_model_config(hf_config_json(m))
// == m in every field HF has a word for (floats are written as the shortest decimal that reads back
// as the same float32); d_ff, n_kv_heads and moe.d_ff_expert come back as 0 when they equal their
// defaults, a Llama's or Mixtral's dropout as 0, and a Mixtral's d_ff (no block uses it) as 0 and
// its MoE training settings (z loss, capacity: Mixtral is dropless) as the defaults.
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "interop/hf_interop.h"

namespace megatrain {
namespace {

using nlohmann::json;

// A float as JSON shows it: the shortest decimal that reads back as the same float.
double json_float(float f) { return std::stod(fmt::format("{}", f)); }

// Typed reads of config.json keys; absent and null keys take the default, or are an error without one.
struct Fields {
  const json& j;
  const std::string& source;
  const std::string& type;  // model_type, for messages
  std::string prefix = "";  // "rope_scaling." for the keys of a nested object

  const json* get(const char* key) const {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  [[noreturn]] void fail(const char* key, const std::string& want) const {
    throw DataError(fmt::format("{}: '{}{}' must be {}, got {}", source, prefix, key, want, j.at(key).dump()));
  }
  const json& required(const char* key) const {
    const json* v = get(key);
    MT_DATA_CHECK(v, "{}: '{}{}' is missing; a \"{}\" config.json needs it", source, prefix, key, type);
    return *v;
  }
  int integer(const char* key, std::optional<int> def = std::nullopt) const {
    const json* v = def && !get(key) ? nullptr : &required(key);
    if (!v) return *def;
    if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > INT_MAX)
      fail(key, "a non-negative integer");
    return static_cast<int>(v->get<int64_t>());
  }
  float number(const char* key, float def) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_number()) fail(key, "a number");
    return static_cast<float>(v->get<double>());
  }
  bool boolean(const char* key, bool def) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_boolean()) fail(key, "true or false");
    return v->get<bool>();
  }
  std::string string(const char* key, const std::string& def) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_string()) fail(key, "a string");
    return v->get<std::string>();
  }
  // KEY must have the value megatrain's layers compute with.
  template <class T>
  void require(const char* key, const T& got, const T& want, const std::string& why) const {
    MT_DATA_CHECK(got == want, "{}: {} = {} is not supported: {}", source, key, json(got).dump(), why);
  }
};

ModelConfig gpt2_model(const Fields& f) {
  ModelConfig m;  // layernorm, learned positions, gelu, bias, tied: the defaults
  m.d_model = f.integer("n_embd");
  m.n_layers = f.integer("n_layer");
  m.n_heads = f.integer("n_head");
  m.vocab_size = f.integer("vocab_size");
  m.max_seq_len = f.integer("n_positions", 1024);
  m.d_ff = f.integer("n_inner", 0);
  m.norm_eps = f.number("layer_norm_epsilon", 1e-5f);
  m.init_std = f.number("initializer_range", 0.02f);
  m.dropout = f.number("resid_pdrop", 0.1f);
  const std::string act = f.string("activation_function", "gelu_new");
  MT_DATA_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast",
                "{}: activation_function = \"{}\" is not supported: megatrain's gelu is the tanh approximation "
                "(\"gelu_new\")",
                f.source, act);
  f.require("tie_word_embeddings", f.boolean("tie_word_embeddings", true), true,
            "megatrain's GPT-2 family ties the head to the embedding");
  f.require("scale_attn_weights", f.boolean("scale_attn_weights", true), true, "attention is scaled by 1/√head_dim");
  f.require("scale_attn_by_inverse_layer_idx", f.boolean("scale_attn_by_inverse_layer_idx", false), false,
            "attention is scaled by 1/√head_dim only");
  f.require("add_cross_attention", f.boolean("add_cross_attention", false), false,
            "megatrain models are decoders only");
  return m;
}

// rope_scaling (transformers 4) or rope_parameters (transformers 5, which also holds rope_theta, read
// into THETA): the scalings transformers defines and megatrain computes (kernels/rope_frequencies.h);
// "dynamic" and "longrope" (which change with the sequence's length), DeepSeek's mscale and any key
// megatrain does not read are refused by name. YaRN's original_max_position_embeddings is the
// pretraining context its ramp is measured in, as newer transformers read it (4.49 measures in
// max_position_embeddings and ignores the key); since transformers versions then disagree on the
// factor, it must equal max_position_embeddings / original_max_position_embeddings.
RopeScalingConfig rope_scaling_of(const Fields& f, int max_len, float& theta) {
  const json* params = f.get("rope_parameters");
  const json* scaling = params ? params : f.get("rope_scaling");
  const char* name = params ? "rope_parameters" : "rope_scaling";
  RopeScalingConfig r;
  if (!scaling) return r;
  MT_DATA_CHECK(scaling->is_object(), "{}: '{}' must be an object or null, got {}", f.source, name, scaling->dump());
  const Fields g{*scaling, f.source, f.type, std::string(name) + "."};
  if (params) theta = g.number("rope_theta", theta);
  const std::string type = g.string("rope_type", g.string("type", "default"));
  std::vector<std::string> keys = {"rope_type", "type", "rope_theta"};
  if (type == "default") {
    r.kind = RopeScaling::none;
  } else if (type == "linear" || type == "llama3" || type == "yarn") {
    r.kind = type == "linear" ? RopeScaling::linear : type == "llama3" ? RopeScaling::llama3 : RopeScaling::yarn;
    r.factor = g.number("factor", 0.0f);
    MT_DATA_CHECK(g.get("factor"), "{}: '{}.factor' is missing; rope_type \"{}\" needs it", f.source, name, type);
    keys.emplace_back("factor");
  } else {
    throw DataError(
        fmt::format("{}: {}.rope_type = \"{}\" is not supported: megatrain computes \"default\", "
                    "\"linear\", \"llama3\" and \"yarn\" (\"dynamic\" and \"longrope\" change with the "
                    "sequence's length)",
                    f.source, name, type));
  }
  if (r.kind == RopeScaling::llama3) {
    r.low_freq_factor = g.number("low_freq_factor", 0.0f);
    r.high_freq_factor = g.number("high_freq_factor", 0.0f);
    r.original_max_len = g.integer("original_max_position_embeddings");
    for (const char* k : {"low_freq_factor", "high_freq_factor"})
      MT_DATA_CHECK(g.get(k), "{}: '{}.{}' is missing; rope_type \"llama3\" needs it", f.source, name, k);
    keys.insert(keys.end(), {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
  }
  if (r.kind == RopeScaling::yarn) {
    // transformers reads `beta_fast or 32`: 0 too stands for the default.
    r.beta_fast = g.number("beta_fast", 0.0f) != 0.0f ? g.number("beta_fast", 0.0f) : 32.0f;
    r.beta_slow = g.number("beta_slow", 0.0f) != 0.0f ? g.number("beta_slow", 0.0f) : 1.0f;
    r.attention_factor = g.number("attention_factor", 0.0f);
    MT_DATA_CHECK(g.boolean("truncate", true),
                  "{}: {}.truncate = false is not supported: megatrain rounds YaRN's ramp bounds to whole pairs",
                  f.source, name);
    r.original_max_len = g.integer("original_max_position_embeddings", 0);
    MT_DATA_CHECK(
        r.original_max_len == 0 || r.factor * static_cast<float>(r.original_max_len) == static_cast<float>(max_len),
        "{}: {}.factor = {} is not max_position_embeddings / original_max_position_embeddings = {} / {}: "
        "transformers versions disagree on which of the two YaRN then uses; make them agree",
        f.source, name, r.factor, max_len, r.original_max_len);
    keys.insert(keys.end(),
                {"beta_fast", "beta_slow", "attention_factor", "truncate", "original_max_position_embeddings"});
  }
  for (const auto& [key, value] : scaling->items())
    MT_DATA_CHECK(value.is_null() || std::find(keys.begin(), keys.end(), key) != keys.end(),
                  "{}: {}.{} = {} is not supported: megatrain's \"{}\" RoPE does not read it", f.source, name, key,
                  value.dump(), type);
  return r;
}

// What LlamaConfig and MixtralConfig default differently.
struct LlamaDefaults {
  int kv_heads = 0;  // num_key_value_heads when absent; 0: num_attention_heads
  int max_seq_len = 2048;
  float norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
};

// Llama's layers (Mixtral's too, which the caller then makes MoE).
ModelConfig llama_model(const Fields& f, const LlamaDefaults& d) {
  ModelConfig m;
  m.norm = NormKind::rmsnorm;
  m.position = PositionKind::rope;
  m.activation = ActivationKind::swiglu;
  m.bias = false;
  m.d_model = f.integer("hidden_size");
  m.n_layers = f.integer("num_hidden_layers");
  m.n_heads = f.integer("num_attention_heads");
  m.vocab_size = f.integer("vocab_size");
  m.n_kv_heads = f.integer("num_key_value_heads", d.kv_heads > 0 ? d.kv_heads : m.n_heads);
  if (m.n_kv_heads == m.n_heads) m.n_kv_heads = 0;
  m.d_ff = 0;
  const int default_ff = m.ffn_dim();  // the Llama rule for d_model, kept as 0 when the file uses it
  m.d_ff = f.integer("intermediate_size");
  if (m.d_ff == default_ff) m.d_ff = 0;
  m.max_seq_len = f.integer("max_position_embeddings", d.max_seq_len);
  m.norm_eps = f.number("rms_norm_eps", d.norm_eps);
  m.init_std = f.number("initializer_range", 0.02f);
  m.dropout = 0.0f;
  m.tie_embeddings = f.boolean("tie_word_embeddings", false);
  m.rope_theta = f.number("rope_theta", d.rope_theta);
  m.rope_scaling = rope_scaling_of(f, m.max_seq_len, m.rope_theta);
  MT_DATA_CHECK(f.number("partial_rotary_factor", 1.0f) == 1.0f,
                "{}: partial_rotary_factor = {} is not supported: megatrain's RoPE turns the whole head", f.source,
                f.number("partial_rotary_factor", 1.0f));
  f.require("hidden_act", f.string("hidden_act", "silu"), std::string("silu"), "megatrain's swiglu gates with silu");
  f.require("attention_bias", f.boolean("attention_bias", false), false, "megatrain's Llama family has no biases");
  f.require("mlp_bias", f.boolean("mlp_bias", false), false, "megatrain's Llama family has no biases");
  if (m.n_heads > 0 && f.get("head_dim"))
    f.require("head_dim", f.integer("head_dim"), m.d_model / m.n_heads,
              "head_dim must be hidden_size / num_attention_heads");
  return m;
}

// MixtralConfig's defaults differ from LlamaConfig's in GQA, context, eps and RoPE base.
ModelConfig mixtral_model(const Fields& f) {
  ModelConfig m = llama_model(f, LlamaDefaults{8, 4096 * 32, 1e-5f, 1e6f});
  // intermediate_size is the experts' width: every block is MoE, so the dense d_ff is unused.
  m.moe.d_ff_expert = m.d_ff;
  m.d_ff = 0;
  m.moe.n_experts = f.integer("num_local_experts");
  m.moe.top_k = f.integer("num_experts_per_tok", 2);
  // (top_k ≤ n_experts is validate_model_config's rule.)
  MT_DATA_CHECK(m.moe.top_k >= 2,
                "{}: num_experts_per_tok = {} is not supported: at 1 Mixtral's renormalised gate is 1, megatrain's "
                "the router probability",
                f.source, m.moe.top_k);
  m.moe.router = RouterKind::softmax;
  m.moe.aux_loss_coef = f.number("router_aux_loss_coef", 0.001f);
  // A window at least as long as the context masks nothing (transformers masks keys at distance
  // ≥ sliding_window); a shorter one is attention megatrain does not compute.
  const int window = f.integer("sliding_window", m.max_seq_len);
  MT_DATA_CHECK(window >= m.max_seq_len,
                "{}: sliding_window = {} is not supported: megatrain attends over the whole context "
                "(max_position_embeddings = {}); use null",
                f.source, window, m.max_seq_len);
  MT_DATA_CHECK(m.rope_scaling.kind == RopeScaling::none,
                "{}: rope_scaling is not supported for Mixtral: MixtralConfig has no rope scaling; use null", f.source);
  // router_jitter_noise, like attention_dropout, perturbs training only and is not read.
  return m;
}

// Qwen2 (Qwen2.5) is Llama with a bias on the q, k and v projections (not on o_proj or the MLP) and
// its own defaults; its sliding window binds only when use_sliding_window is true, from block
// max_window_layers on, and then only if shorter than the context.
ModelConfig qwen2_model(const Fields& f) {
  ModelConfig m = llama_model(f, LlamaDefaults{32, 32768, 1e-6f, 10000.0f});
  m.qkv_bias = true;
  const int window = f.integer("sliding_window", 4096);
  const bool binds = f.boolean("use_sliding_window", false) && window < m.max_seq_len &&
                     f.integer("max_window_layers", 28) < m.n_layers;
  MT_DATA_CHECK(!binds,
                "{}: use_sliding_window = true with sliding_window = {} is not supported: megatrain attends over the "
                "whole context (max_position_embeddings = {}); set use_sliding_window to false",
                f.source, window, m.max_seq_len);
  return m;
}

// rope_scaling as transformers 4 writes it: null, or the type and the parameters it reads.
json rope_scaling_json(const ModelConfig& m) {
  const RopeScalingConfig& r = m.rope_scaling;
  if (r.kind == RopeScaling::none) return nullptr;
  json j;
  j["rope_type"] = r.kind == RopeScaling::linear ? "linear" : r.kind == RopeScaling::llama3 ? "llama3" : "yarn";
  j["factor"] = json_float(r.factor);
  if (r.kind == RopeScaling::llama3) {
    j["low_freq_factor"] = json_float(r.low_freq_factor);
    j["high_freq_factor"] = json_float(r.high_freq_factor);
    j["original_max_position_embeddings"] = r.original_max_len;
  }
  if (r.kind == RopeScaling::yarn) {
    j["beta_fast"] = json_float(r.beta_fast);
    j["beta_slow"] = json_float(r.beta_slow);
    if (r.attention_factor > 0.0f) j["attention_factor"] = json_float(r.attention_factor);
    if (r.original_max_len > 0) j["original_max_position_embeddings"] = r.original_max_len;
  }
  return j;
}

}  // namespace

json hf_config_json(const ModelConfig& m, HfFamily family, Precision dtype) {
  json j;
  j["vocab_size"] = m.vocab_size;
  j["initializer_range"] = json_float(m.init_std);
  j["torch_dtype"] = dtype == Precision::fp32 ? "float32" : dtype == Precision::bf16 ? "bfloat16" : "float16";
  j["use_cache"] = true;
  if (family == HfFamily::gpt2) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["n_embd"] = m.d_model;
    j["n_layer"] = m.n_layers;
    j["n_head"] = m.n_heads;
    j["n_positions"] = m.max_seq_len;
    j["n_ctx"] = m.max_seq_len;
    j["n_inner"] = m.d_ff == 0 ? json(nullptr) : json(m.d_ff);
    j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = json_float(m.norm_eps);
    j["resid_pdrop"] = json_float(m.dropout);
    j["embd_pdrop"] = json_float(m.dropout);
    j["attn_pdrop"] = 0.0;  // megatrain never drops attention probabilities
    j["scale_attn_weights"] = true;
    j["tie_word_embeddings"] = true;
    return j;
  }
  const bool mixtral = family == HfFamily::mixtral, qwen2 = family == HfFamily::qwen2;
  j["architectures"] = {hf_architecture(family)};
  j["model_type"] = mixtral ? "mixtral" : qwen2 ? "qwen2" : "llama";
  j["hidden_size"] = m.d_model;
  j["intermediate_size"] = mixtral ? m.expert_ffn_dim() : m.ffn_dim();
  j["num_hidden_layers"] = m.n_layers;
  j["num_attention_heads"] = m.n_heads;
  j["num_key_value_heads"] = m.kv_heads();
  j["head_dim"] = m.head_dim();
  j["max_position_embeddings"] = m.max_seq_len;
  j["rms_norm_eps"] = json_float(m.norm_eps);
  j["rope_theta"] = json_float(m.rope_theta);
  j["hidden_act"] = "silu";
  j["attention_dropout"] = 0.0;
  j["tie_word_embeddings"] = m.tie_embeddings;
  if (qwen2) {
    j["rope_scaling"] = rope_scaling_json(m);
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = m.n_layers;
    return j;
  }
  if (!mixtral) {
    j["rope_scaling"] = rope_scaling_json(m);
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
    return j;
  }
  j["num_local_experts"] = m.moe.n_experts;
  j["num_experts_per_tok"] = m.moe.top_k;
  j["router_aux_loss_coef"] = json_float(m.moe.aux_loss_coef);
  j["router_jitter_noise"] = 0.0;
  j["output_router_logits"] = false;
  j["sliding_window"] = nullptr;  // full causal attention
  return j;
}

ModelConfig hf_model_config(const json& config, const std::string& source) {
  MT_DATA_CHECK(config.is_object(), "{}: must be a JSON object", source);
  const std::string none;
  const Fields probe{config, source, none};
  const std::string type = probe.string("model_type", "");
  const Fields f{config, source, type};
  ModelConfig m;
  if (type == "gpt2")
    m = gpt2_model(f);
  else if (type == "llama")
    m = llama_model(f, LlamaDefaults{});
  else if (type == "mixtral")
    m = mixtral_model(f);
  else if (type == "qwen2")
    m = qwen2_model(f);
  else
    throw DataError(
        fmt::format("{}: model_type \"{}\" is not supported; megatrain imports \"gpt2\" "
                    "(GPT2LMHeadModel), \"llama\" (LlamaForCausalLM), \"mixtral\" "
                    "(MixtralForCausalLM) and \"qwen2\" (Qwen2ForCausalLM)",
                    source, type));
  validate_model_config(m, source);  // before any tensor is sized from m
  return m;
}

}  // namespace megatrain
