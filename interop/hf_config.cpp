// config.json ↔ ModelConfig for the Hugging Face families (hf_interop.h). Export writes the keys
// transformers' GPT2Config / LlamaConfig / MixtralConfig read; import reads them back, defaults what
// transformers would default, and refuses every option that changes the model's arithmetic in a
// way megatrain's layers do not (another activation, RoPE scaling, biases in Llama, scaled GPT-2
// attention, a Mixtral sliding window that binds, …). Invariant: hf_model_config(hf_config_json(m))
// == m in every field HF has a word for (floats are written as the shortest decimal that reads back
// as the same float32); d_ff, n_kv_heads and moe.d_ff_expert come back as 0 when they equal their
// defaults, a Llama's or Mixtral's dropout as 0, and a Mixtral's d_ff (no block uses it) as 0 and
// its MoE training settings (z loss, capacity: Mixtral is dropless) as the defaults.
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <string>

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

  const json* get(const char* key) const {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  [[noreturn]] void fail(const char* key, const std::string& want) const {
    throw DataError(fmt::format("{}: '{}' must be {}, got {}", source, key, want, j.at(key).dump()));
  }
  const json& required(const char* key) const {
    const json* v = get(key);
    MT_DATA_CHECK(v, "{}: '{}' is missing; a \"{}\" config.json needs it", source, key, type);
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
  // transformers 5 keeps RoPE settings in rope_parameters; 4 in rope_theta and rope_scaling.
  const json* params = f.get("rope_parameters");
  const json* scaling = f.get("rope_scaling");
  m.rope_theta = f.number("rope_theta", d.rope_theta);
  if (params && params->is_object() && params->contains("rope_theta") && (*params)["rope_theta"].is_number())
    m.rope_theta = static_cast<float>((*params)["rope_theta"].get<double>());
  for (const auto& [key, value] : {std::pair{"rope_scaling", scaling}, std::pair{"rope_parameters", params}}) {
    if (!value) continue;
    std::string type = "default";
    if (value->is_object())
      for (const char* k : {"rope_type", "type"})
        if (value->contains(k) && (*value)[k].is_string()) type = (*value)[k].get<std::string>();
    MT_DATA_CHECK(value->is_object() && type == "default",
                   "{}: {} = {} is not supported: megatrain's RoPE is the default, unscaled one", f.source, key,
                   value->dump());
  }
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
  // router_jitter_noise, like attention_dropout, perturbs training only and is not read.
  return m;
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
  const bool mixtral = family == HfFamily::mixtral;
  j["architectures"] = {hf_architecture(family)};
  j["model_type"] = mixtral ? "mixtral" : "llama";
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
  if (!mixtral) {
    j["rope_scaling"] = nullptr;
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
  else
    throw DataError(fmt::format("{}: model_type \"{}\" is not supported; megatrain imports \"gpt2\" "
                                 "(GPT2LMHeadModel), \"llama\" (LlamaForCausalLM) and \"mixtral\" "
                                 "(MixtralForCausalLM)",
                                 source, type));
  validate_model_config(m, source);  // before any tensor is sized from m
  return m;
}

}  // namespace megatrain
