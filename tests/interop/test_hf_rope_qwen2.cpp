// The checkpoints of 2026 in interop/: Llama configs with rope_scaling (llama3, linear, yarn; as
// transformers 4 writes it and as transformers 5's rope_parameters) and Qwen2 / Qwen2.5 (a bias on
// q, k and v only). Checked: the family rules, the config.json keys transformers reads (names
// written out by hand from its configuration classes), the q/k/v bias tensors by their HF names and
// shapes, export → import bit-exact, and every rope_scaling or Qwen2 option megatrain does not
// compute refused naming the file and the key. (The logits and 10 training steps against
// transformers itself: tests/reference/hf_logits_reference.py, hf_train_reference.py.)
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "config/config.h"
#include "interop/hf_interop.h"
#include "tests/expect_contains.h"
#include "tests/input_error.h"
#include "tests/interop/hf_folder.h"

namespace megatrain {
namespace {

using nlohmann::json;
using test::hf_llama_like;
using test::input_error_of;
using test::read_raw;

ModelConfig qwen2_like() {
  ModelConfig m = hf_llama_like();
  m.qkv_bias = true;
  m.tie_embeddings = true;
  return m;
}

ModelConfig scaled(RopeScaling kind) {
  ModelConfig m = hf_llama_like();
  m.rope_scaling.kind = kind;
  m.rope_scaling.factor = 8.0f;
  if (kind == RopeScaling::llama3) m.rope_scaling.original_max_len = 16;
  if (kind == RopeScaling::yarn) m.rope_scaling.attention_factor = 1.25f;
  return m;
}

std::string toml_of(const ModelConfig& m) { return config_to_toml(config_for_model(m, "x")); }

class HfRopeQwen2 : public test::HfFolderTest {};

TEST(HfFamily, QkvBiasMakesQwen2AndRopeScalingStaysLlamaButNotMixtral) {
  EXPECT_EQ(hf_family(qwen2_like(), "x"), HfFamily::qwen2);
  EXPECT_STREQ(hf_architecture(HfFamily::qwen2), "Qwen2ForCausalLM");
  for (RopeScaling k : {RopeScaling::linear, RopeScaling::llama3, RopeScaling::yarn})
    EXPECT_EQ(hf_family(scaled(k), "x"), HfFamily::llama);
  ModelConfig moe = scaled(RopeScaling::linear);
  moe.moe.n_experts = 4;
  EXPECT_CONTAINS(input_error_of([&] { hf_family(moe, "ckpt"); }), "model.rope_scaling = \"none\"");
  ModelConfig biased = qwen2_like();
  biased.bias = true;  // every bias: GPT-2's rule, with the rest Llama's: no family
  const std::string msg = input_error_of([&] { hf_family(biased, "ckpt"); });
  EXPECT_CONTAINS(msg, "as Qwen2 (Qwen2ForCausalLM) it would need model.bias = false");
}

TEST_F(HfRopeQwen2, Qwen2ExportHasTheQkvBiasesAndTheKeysQwen2ConfigReads) {
  const ModelConfig m = qwen2_like();
  const FlatBuffer p = export_random(m, "qwen2");
  const auto tensors = read_raw(dir_ / "qwen2" / "model.safetensors");
  const int64_t C = m.d_model, KV = int64_t{m.kv_heads()} * m.head_dim();
  for (int l = 0; l < m.n_layers; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".self_attn.";
    EXPECT_EQ(tensors.at(h + "q_proj.bias").shape, std::vector<int64_t>{C});
    EXPECT_EQ(tensors.at(h + "k_proj.bias").shape, std::vector<int64_t>{KV});
    EXPECT_EQ(tensors.at(h + "v_proj.bias").shape, std::vector<int64_t>{KV});
    EXPECT_FALSE(tensors.count(h + "o_proj.bias"));
  }
  EXPECT_FALSE(tensors.count("lm_head.weight"));  // tied
  // k_proj.bias is rows [C, C + KV) of our fused qkv bias, as q_proj.weight's rows are of qkv.weight.
  const ParamLayout layout = gpt_param_layout(m);
  const float* bias = p.data() + layout.offset(layout.index_of("layers.1.attn.qkv.bias"));
  EXPECT_EQ(0, std::memcmp(tensors.at("model.layers.1.self_attn.k_proj.bias").data.data(), bias + C, KV * 4));

  const json j = config_of("qwen2");
  EXPECT_EQ(j["model_type"], "qwen2");
  EXPECT_EQ(j["architectures"], json({"Qwen2ForCausalLM"}));
  EXPECT_EQ(j["use_sliding_window"], false);
  EXPECT_EQ(j["tie_word_embeddings"], true);
  EXPECT_FALSE(j.contains("attention_bias"));  // Qwen2Config has no such key: its q/k/v bias is fixed

  const HfImport r = hf_import((dir_ / "qwen2").string());
  EXPECT_EQ(toml_of(r.model), toml_of(m));
  ASSERT_EQ(r.layout.total(), layout.total());
  EXPECT_EQ(0, std::memcmp(r.params.data(), p.data(), static_cast<size_t>(p.size()) * 4));
}

TEST_F(HfRopeQwen2, RopeScalingIsWrittenWithTransformersNamesAndReadBackExactly) {
  const std::vector<std::tuple<RopeScaling, json>> cases = {
      {RopeScaling::linear, json{{"rope_type", "linear"}, {"factor", 8.0}}},
      {RopeScaling::llama3, json{{"rope_type", "llama3"},
                                 {"factor", 8.0},
                                 {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0},
                                 {"original_max_position_embeddings", 16}}},
      {RopeScaling::yarn, json{{"rope_type", "yarn"},
                               {"factor", 8.0},
                               {"beta_fast", 32.0},
                               {"beta_slow", 1.0},
                               {"attention_factor", 1.25}}}};
  for (const auto& [kind, want] : cases) {
    const ModelConfig m = scaled(kind);
    const FlatBuffer p = export_random(m, "scaled");
    EXPECT_EQ(config_of("scaled")["rope_scaling"], want);
    const HfImport r = hf_import((dir_ / "scaled").string());
    EXPECT_EQ(toml_of(r.model), toml_of(m)) << want.dump();
    EXPECT_EQ(0, std::memcmp(r.params.data(), p.data(), static_cast<size_t>(p.size()) * 4));
  }
  EXPECT_TRUE(hf_config_json(hf_llama_like(), HfFamily::llama)["rope_scaling"].is_null());
}

TEST(HfConfig, ReadsTransformers5RopeParametersAndTheOldTypeKey) {
  json j = hf_config_json(hf_llama_like(), HfFamily::llama);
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                          {"factor", 32.0},          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  const ModelConfig m = hf_model_config(j, "config.json");
  EXPECT_EQ(m.rope_theta, 500000.0f);
  EXPECT_EQ(m.rope_scaling.kind, RopeScaling::llama3);
  EXPECT_EQ(m.rope_scaling.factor, 32.0f);
  EXPECT_EQ(m.rope_scaling.original_max_len, 8192);
  j.erase("rope_parameters");
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(hf_model_config(j, "config.json").rope_scaling.kind, RopeScaling::linear);
}

TEST(HfConfig, RopeAndQwen2OptionsMegatrainDoesNotComputeAreRefusedByName) {
  const json llama = hf_config_json(hf_llama_like(), HfFamily::llama);
  const json yarn = {{"rope_type", "yarn"}, {"factor", 4.0}};
  auto with = [](json j, const json& extra) {
    j.update(extra);
    return j;
  };
  const std::vector<std::tuple<json, std::string>> bad = {
      {with(llama, {{"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}}}), "rope_type = \"dynamic\""},
      {with(llama, {{"rope_scaling", {{"rope_type", "longrope"}}}}), "\"longrope\" change with"},
      {with(llama, {{"rope_scaling", {{"rope_type", "linear"}}}}), "'rope_scaling.factor' is missing"},
      {with(llama, {{"rope_scaling",
                     {{"rope_type", "llama3"},
                      {"factor", 8.0},
                      {"high_freq_factor", 4.0},
                      {"original_max_position_embeddings", 16}}}}),
       "'rope_scaling.low_freq_factor' is missing"},
      {with(llama, {{"rope_scaling", with(yarn, {{"mscale", 0.707}})}}), "rope_scaling.mscale = 0.707"},
      {with(llama, {{"rope_scaling", with(yarn, {{"truncate", false}})}}), "truncate = false"},
      {with(llama, {{"rope_scaling", with(yarn, {{"original_max_position_embeddings", 16}})}}),
       "factor = 4 is not max_position_embeddings / original_max_position_embeddings = 32 / 16"},
      {with(llama, {{"rope_scaling", {{"rope_type", "linear"}, {"factor", 0.5}}}}), "model.rope_factor = 0.5"},
      {with(llama, {{"rope_scaling", "llama3"}}), "'rope_scaling' must be an object"},
      {with(llama, {{"partial_rotary_factor", 0.5}}), "partial_rotary_factor = 0.5"},
      {with(with(llama, {{"model_type", "qwen2"}}),
            {{"use_sliding_window", true}, {"sliding_window", 8}, {"max_window_layers", 0}}),
       "use_sliding_window = true with sliding_window = 8"},
  };
  for (const auto& [j, expect] : bad) {
    const std::string msg = input_error_of([&] { hf_model_config(j, "dir/config.json"); });
    EXPECT_CONTAINS(msg, "dir/config.json");
    EXPECT_CONTAINS(msg, expect);
  }
  // A window that binds nowhere (use_sliding_window false, or longer than the context) is fine.
  const json qwen = with(llama, {{"model_type", "qwen2"}, {"sliding_window", 8}});
  EXPECT_TRUE(hf_model_config(qwen, "x").qkv_bias);
  // A yarn factor that equals the ratio is read, with its original context.
  const json ratio =
      with(llama, {{"rope_scaling", with(yarn, {{"factor", 2.0}, {"original_max_position_embeddings", 16}})}});
  EXPECT_EQ(hf_model_config(ratio, "x").rope_scaling.original_max_len, 16);
}

}  // namespace
}  // namespace megatrain
