// Tests of the Mixtral family of interop/hf_interop: which MoE configs export as
// MixtralForCausalLM and the constraints listed for those that do not, the exported folder read by
// the independent safetensors reader of hf_folder.h (every expert's w1 / w3 / w2 against rows of
// our 3-D expert tensors, indexed by hand), config.json keys and MixtralConfig's defaults, export →
// import bit-exact, and bad Mixtral folders refused naming the file and the key or tensor.
// (Logits against transformers' MixtralForCausalLM: tests/reference/hf_logits_reference.py.)
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "config/config.h"
#include "interop/hf_interop.h"
#include "tests/expect_contains.h"
#include "tests/input_error.h"
#include "tests/interop/hf_folder.h"

namespace megatrain {
namespace {

using nlohmann::json;
using test::input_error_of;
using test::RawTensor;
using test::read_raw;

// Every block MoE, experts narrower than the dense rule (96, not ffn_dim() = 192) so that mixing up
// d_ff and d_ff_expert shows.
ModelConfig mixtral_like() {
  ModelConfig m = test::hf_llama_like();
  m.moe.n_experts = 4;
  m.moe.top_k = 2;
  m.moe.d_ff_expert = 96;
  m.moe.aux_loss_coef = 0.01f;
  return m;
}

// The names and shapes of a MixtralForCausalLM checkpoint, written out by hand.
std::map<std::string, std::vector<int64_t>> expected_mixtral(const ModelConfig& m) {
  const int64_t C = m.d_model, V = m.vocab_size, KV = m.kv_heads() * m.head_dim(), Fe = m.expert_ffn_dim();
  std::map<std::string, std::vector<int64_t>> e = {
      {"model.embed_tokens.weight", {V, C}}, {"model.norm.weight", {C}}, {"lm_head.weight", {V, C}}};
  for (int l = 0; l < m.n_layers; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    e[h + "input_layernorm.weight"] = {C}, e[h + "post_attention_layernorm.weight"] = {C};
    e[h + "self_attn.q_proj.weight"] = {C, C}, e[h + "self_attn.k_proj.weight"] = {KV, C};
    e[h + "self_attn.v_proj.weight"] = {KV, C}, e[h + "self_attn.o_proj.weight"] = {C, C};
    e[h + "block_sparse_moe.gate.weight"] = {m.moe.n_experts, C};
    for (int i = 0; i < m.moe.n_experts; ++i) {
      const std::string x = h + "block_sparse_moe.experts." + std::to_string(i) + ".";
      e[x + "w1.weight"] = {Fe, C}, e[x + "w3.weight"] = {Fe, C}, e[x + "w2.weight"] = {C, Fe};
    }
  }
  return e;
}

// Every field transformers' MixtralConfig has a word for: the layers' as a config file writes them,
// the experts' one by one (the training-only MoE settings do not come back).
void expect_same_mixtral(const ModelConfig& got, const ModelConfig& want) {
  ModelConfig got_layers = got, want_layers = want;
  got_layers.moe = want_layers.moe = MoeConfig{};
  EXPECT_EQ(config_to_toml(config_for_model(got_layers, "x")), config_to_toml(config_for_model(want_layers, "x")));
  EXPECT_EQ(got.moe.n_experts, want.moe.n_experts);
  EXPECT_EQ(got.moe.top_k, want.moe.top_k);
  EXPECT_EQ(got.expert_ffn_dim(), want.expert_ffn_dim());
  EXPECT_EQ(got.moe.router, RouterKind::softmax);
  EXPECT_EQ(got.moe.aux_loss_coef, want.moe.aux_loss_coef);
  for (int l = 0; l < got.n_layers; ++l) EXPECT_TRUE(got.moe.is_moe_layer(l)) << l;
}

class HfMixtral : public test::HfFolderTest {};

TEST(HfFamilyMixtral, EveryBlockMoeWithSoftmaxTopKAtLeast2MapsAndOthersAreRefusedWithTheFailedConstraints) {
  EXPECT_EQ(hf_family(mixtral_like(), "x.toml"), HfFamily::mixtral);
  ModelConfig listed = mixtral_like();  // a list naming every block is the same model
  listed.moe.layers = {1, 0};
  EXPECT_EQ(hf_family(listed, "x.toml"), HfFamily::mixtral);
  ModelConfig training = mixtral_like();  // training-only settings do not change the weights
  training.moe.capacity_factor = 1.25f;
  training.moe.drop_policy = DropPolicy::position;
  training.moe.z_loss_coef = 0.001f;
  training.tie_embeddings = true;
  EXPECT_EQ(hf_family(training, "x.toml"), HfFamily::mixtral);

  auto refused = [](ModelConfig m) { return input_error_of([&] { hf_family(m, "ckpt/model.h5"); }); };
  ModelConfig sigmoid = mixtral_like();
  sigmoid.moe.router = RouterKind::sigmoid;
  std::string msg = refused(sigmoid);
  EXPECT_CONTAINS(msg, "ckpt/model.h5");
  EXPECT_CONTAINS(msg, "as Mixtral (MixtralForCausalLM) it would need moe.router = \"softmax\"");
  EXPECT_EQ(msg.find("GPT-2"), std::string::npos) << "an MoE model has no dense family: " << msg;

  ModelConfig every2 = mixtral_like();
  every2.moe.every = 2;
  EXPECT_CONTAINS(refused(every2), "dense here: blocks 1)");
  ModelConfig one_listed = mixtral_like();
  one_listed.moe.layers = {1};
  EXPECT_CONTAINS(refused(one_listed), "moe.layers = 1 or a list of every block");
  EXPECT_CONTAINS(refused(one_listed), "dense here: blocks 0)");
  ModelConfig shared = mixtral_like();
  shared.moe.n_shared_experts = 1;
  EXPECT_CONTAINS(refused(shared), "moe.n_shared_experts = 0");
  ModelConfig residual = mixtral_like();
  residual.moe.residual = true;
  EXPECT_CONTAINS(refused(residual), "moe.residual = false");
  ModelConfig biased = mixtral_like();
  biased.moe.aux_free_bias = 0.001f;
  EXPECT_CONTAINS(refused(biased), "moe.aux_free_bias = 0");
  ModelConfig top1 = mixtral_like();
  top1.moe.top_k = 1;
  EXPECT_CONTAINS(refused(top1), "moe.top_k >= 2");

  ModelConfig gpt2_moe = test::hf_gpt2_like();  // every failure listed, the layers' and the experts'
  gpt2_moe.moe = sigmoid.moe;
  msg = refused(gpt2_moe);
  EXPECT_CONTAINS(msg, "model.norm = \"rmsnorm\", model.position = \"rope\", model.activation = \"swiglu\", "
                       "model.bias = false, moe.router = \"softmax\"");
}

TEST_F(HfMixtral, ExportHasExactlyTheHfNamesAndEachExpertsRowsOfOurExpertTensors) {
  const ModelConfig m = mixtral_like();
  const ParamLayout layout = gpt_param_layout(m);
  const FlatBuffer p = export_random(m, "mixtral");
  const auto tensors = read_raw(dir_ / "mixtral" / "model.safetensors");
  const auto want = expected_mixtral(m);
  ASSERT_EQ(tensors.size(), want.size());
  for (const auto& [name, shape] : want) {
    ASSERT_TRUE(tensors.count(name)) << name;
    EXPECT_EQ(tensors.at(name).shape, shape) << name;
  }
  const int64_t C = m.d_model, Fe = m.expert_ffn_dim(), E = m.moe.n_experts;
  for (int l = 0; l < m.n_layers; ++l) {
    const std::string L = "layers." + std::to_string(l) + ".moe.";
    const std::string h = "model.layers." + std::to_string(l) + ".block_sparse_moe.";
    // fc (E, 2Fe, C): expert i, row r, column c at ((i·2Fe) + r)·C + c; proj (E, C, Fe) likewise.
    const float* fc = p.data() + layout.offset(layout.index_of(L + "experts.fc.weight"));
    const float* proj = p.data() + layout.offset(layout.index_of(L + "experts.proj.weight"));
    const float* router = p.data() + layout.offset(layout.index_of(L + "router.weight"));
    EXPECT_EQ(0, std::memcmp(tensors.at(h + "gate.weight").data.data(), router, E * C * 4));
    for (int64_t i = 0; i < E; ++i) {
      const std::string x = h + "experts." + std::to_string(i) + ".";
      const auto &w1 = tensors.at(x + "w1.weight").data, &w3 = tensors.at(x + "w3.weight").data;
      const auto& w2 = tensors.at(x + "w2.weight").data;
      for (int64_t r = 0; r < Fe; ++r)
        for (int64_t c = 0; c < C; ++c) {
          ASSERT_EQ(w1[static_cast<size_t>(r * C + c)], fc[(i * 2 * Fe + r) * C + c]) << x << " w1 " << r;
          ASSERT_EQ(w3[static_cast<size_t>(r * C + c)], fc[(i * 2 * Fe + Fe + r) * C + c]) << x << " w3 " << r;
        }
      for (int64_t r = 0; r < C; ++r)
        for (int64_t c = 0; c < Fe; ++c)
          ASSERT_EQ(w2[static_cast<size_t>(r * Fe + c)], proj[(i * C + r) * Fe + c]) << x << " w2 " << r;
    }
  }
}

TEST_F(HfMixtral, ConfigJsonHasTheKeysMixtralConfigReads) {
  ModelConfig m = mixtral_like();
  m.moe.capacity_factor = 1.5f;  // not written: Mixtral is dropless
  export_random(m, "mixtral");
  const json j = config_of("mixtral");
  EXPECT_EQ(j["architectures"], json({"MixtralForCausalLM"}));
  EXPECT_EQ(j["model_type"], "mixtral");
  EXPECT_EQ(j["hidden_size"], 64);
  EXPECT_EQ(j["intermediate_size"], 96);
  EXPECT_EQ(j["num_hidden_layers"], 2);
  EXPECT_EQ(j["num_attention_heads"], 4);
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["head_dim"], 16);
  EXPECT_EQ(j["max_position_embeddings"], 32);
  EXPECT_EQ(j["rms_norm_eps"], 1e-6);
  EXPECT_EQ(j["rope_theta"], 500000.0);
  EXPECT_EQ(j["vocab_size"], 257);
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_EQ(j["hidden_act"], "silu");
  EXPECT_EQ(j["num_local_experts"], 4);
  EXPECT_EQ(j["num_experts_per_tok"], 2);
  EXPECT_EQ(j["router_aux_loss_coef"], 0.01);
  EXPECT_EQ(j["output_router_logits"], false);
  EXPECT_TRUE(j.contains("sliding_window") && j["sliding_window"].is_null());
  EXPECT_FALSE(j.contains("capacity_factor"));
}

TEST_F(HfMixtral, AbsentKeysTakeMixtralConfigsDefaults) {
  const json j = {{"model_type", "mixtral"},      {"hidden_size", 64},       {"num_hidden_layers", 2},
                  {"num_attention_heads", 8},     {"vocab_size", 257},       {"intermediate_size", 96},
                  {"num_local_experts", 4},       {"sliding_window", nullptr}};
  const ModelConfig m = hf_model_config(j, "config.json");
  EXPECT_EQ(m.n_kv_heads, 0);  // MixtralConfig's 8 = num_attention_heads here
  EXPECT_EQ(m.max_seq_len, 4096 * 32);
  EXPECT_EQ(m.norm_eps, 1e-5f);
  EXPECT_EQ(m.rope_theta, 1e6f);
  EXPECT_FALSE(m.tie_embeddings);
  EXPECT_EQ(m.moe.top_k, 2);
  EXPECT_EQ(m.moe.aux_loss_coef, 0.001f);
  EXPECT_EQ(m.moe.capacity_factor, 0.0f);
  EXPECT_EQ(m.d_ff, 0);
  EXPECT_EQ(m.expert_ffn_dim(), 96);
  json gqa = j;
  gqa["num_attention_heads"] = 16;  // absent num_key_value_heads: MixtralConfig's 8, not 16
  EXPECT_EQ(hf_model_config(gqa, "config.json").kv_heads(), 8);
}

TEST_F(HfMixtral, ExportThenImportIsBitExact) {
  ModelConfig dropping = mixtral_like();  // training settings are not exported: the weights are
  dropping.moe.capacity_factor = 1.25f;
  dropping.moe.z_loss_coef = 0.001f;
  ModelConfig tied = mixtral_like();
  tied.tie_embeddings = true;
  tied.n_kv_heads = 0;
  tied.moe.d_ff_expert = 0;  // ffn_dim(): comes back as 0
  tied.moe.layers = {0, 1};  // comes back as moe.layers = 1
  tied.moe.top_k = 3;
  for (const auto& [name, m] : {std::pair{"plain", mixtral_like()}, {"dropping", dropping}, {"tied", tied}}) {
    const FlatBuffer p = export_random(m, name);
    const HfImport r = hf_import((dir_ / name).string());
    expect_same_mixtral(r.model, m);
    EXPECT_EQ(r.model.moe.d_ff_expert, m.moe.d_ff_expert) << name;
    EXPECT_TRUE(r.model.moe.layers.empty()) << name;
    EXPECT_EQ(r.model.moe.capacity_factor, 0.0f) << name;
    ASSERT_EQ(r.layout.total(), gpt_param_layout(m).total()) << name;
    EXPECT_EQ(0, std::memcmp(r.params.data(), p.data(), static_cast<size_t>(p.size()) * 4)) << name;
  }
}

TEST_F(HfMixtral, BadFoldersAreRefusedNamingTheFileAndTensor) {
  const ModelConfig m = mixtral_like();
  export_random(m, "mixtral");
  const std::string st = (dir_ / "mixtral" / "model.safetensors").string();
  const std::string cfg = (dir_ / "mixtral" / "config.json").string();
  auto import = [&] { hf_import((dir_ / "mixtral").string()); };

  edit_weights("mixtral", [](auto& t) { t.erase("model.layers.1.block_sparse_moe.experts.3.w3.weight"); });
  std::string msg = input_error_of(import);
  EXPECT_CONTAINS(msg, st);
  EXPECT_CONTAINS(msg, "'model.layers.1.block_sparse_moe.experts.3.w3.weight' is missing");
  EXPECT_CONTAINS(msg, "MixtralForCausalLM");

  export_random(m, "mixtral");
  edit_weights("mixtral", [](auto& t) { t["model.layers.0.block_sparse_moe.experts.2.w2.weight"].shape = {96, 64}; });
  msg = input_error_of(import);
  EXPECT_CONTAINS(msg, "'model.layers.0.block_sparse_moe.experts.2.w2.weight' has shape [96, 64]");
  EXPECT_CONTAINS(msg, "[64, 96]");

  export_random(m, "mixtral");  // a fifth expert config.json does not know of
  edit_weights("mixtral", [](auto& t) {
    t["model.layers.0.block_sparse_moe.experts.4.w1.weight"] = RawTensor{"F32", {96, 64}, std::vector<float>(96 * 64)};
  });
  EXPECT_CONTAINS(input_error_of(import), "unexpected tensors model.layers.0.block_sparse_moe.experts.4.w1.weight");

  export_random(m, "mixtral");
  const json j = config_of("mixtral");
  for (const auto& [key, value, expect] :
       {std::tuple{"num_experts_per_tok", json(1), "num_experts_per_tok = 1 is not supported"},
        std::tuple{"num_experts_per_tok", json(5), "moe.top_k = 5 exceeds moe.n_experts = 4"},
        std::tuple{"sliding_window", json(31), "sliding_window = 31 is not supported"},
        std::tuple{"hidden_act", json("gelu"), "hidden_act = \"gelu\" is not supported"},
        std::tuple{"rope_scaling", json({{"rope_type", "yarn"}, {"factor", 4.0}}), "rope_scaling"}}) {
    json bad = j;
    bad[key] = value;
    write_config("mixtral", bad);
    msg = input_error_of(import);
    EXPECT_CONTAINS(msg, cfg);
    EXPECT_CONTAINS(msg, expect);
  }
  json missing = j;
  missing.erase("num_local_experts");
  write_config("mixtral", missing);
  EXPECT_CONTAINS(input_error_of(import), "'num_local_experts' is missing");

  json window = j;  // a window as long as the context masks nothing
  window["sliding_window"] = 32;
  write_config("mixtral", window);
  EXPECT_EQ(hf_import((dir_ / "mixtral").string()).model.moe.n_experts, 4);
}

}  // namespace
}  // namespace megatrain
