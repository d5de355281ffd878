// Tests of interop/hf_interop: which configs map to which Hugging Face family, the exported folder
// checked by an independent minimal safetensors reader (names, shapes, dtypes, offsets, values
// against our layout by hand), config.json keys, export → import bit-exact for both families, F16/BF16
// and sharded imports, GPT-2 files without the "transformer." prefix, and every bad folder refused
// with an InputError naming the file and the key or tensor. (Round trips through checkpoints and the
// binary: tests/e2e/test_hf_interop_e2e.cpp.)
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "tests/expect_contains.h"
#include "kernels/check.h"
#include "kernels/half.h"
#include "interop/hf_interop.h"
#include "config/config.h"
#include "tests/input_error.h"
#include "tests/interop/hf_folder.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using test::hf_gpt2_like;
using test::input_error_of;
using test::hf_llama_like;
using test::RawTensor;
using test::read_raw;

// The names and shapes a transformers checkpoint of each family has, written out by hand.
std::map<std::string, std::vector<int64_t>> expected_gpt2(const ModelConfig& m) {
  const int64_t C = m.d_model, V = m.vocab_size;
  std::map<std::string, std::vector<int64_t>> e = {{"transformer.wte.weight", {V, C}},
                                                   {"transformer.wpe.weight", {m.max_seq_len, C}},
                                                   {"transformer.ln_f.weight", {C}},
                                                   {"transformer.ln_f.bias", {C}}};
  for (int l = 0; l < m.n_layers; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    for (const char* ln : {"ln_1", "ln_2"}) e[h + ln + ".weight"] = {C}, e[h + ln + ".bias"] = {C};
    e[h + "attn.c_attn.weight"] = {C, 3 * C}, e[h + "attn.c_attn.bias"] = {3 * C};
    e[h + "attn.c_proj.weight"] = {C, C}, e[h + "attn.c_proj.bias"] = {C};
    e[h + "mlp.c_fc.weight"] = {C, 4 * C}, e[h + "mlp.c_fc.bias"] = {4 * C};
    e[h + "mlp.c_proj.weight"] = {4 * C, C}, e[h + "mlp.c_proj.bias"] = {C};
  }
  return e;
}

std::map<std::string, std::vector<int64_t>> expected_llama(const ModelConfig& m) {
  const int64_t C = m.d_model, V = m.vocab_size, D = C / m.n_heads, KV = m.n_kv_heads * D, F = m.ffn_dim();
  std::map<std::string, std::vector<int64_t>> e = {
      {"model.embed_tokens.weight", {V, C}}, {"model.norm.weight", {C}}, {"lm_head.weight", {V, C}}};
  for (int l = 0; l < m.n_layers; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    e[h + "input_layernorm.weight"] = {C}, e[h + "post_attention_layernorm.weight"] = {C};
    e[h + "self_attn.q_proj.weight"] = {C, C}, e[h + "self_attn.k_proj.weight"] = {KV, C};
    e[h + "self_attn.v_proj.weight"] = {KV, C}, e[h + "self_attn.o_proj.weight"] = {C, C};
    e[h + "mlp.gate_proj.weight"] = {F, C}, e[h + "mlp.up_proj.weight"] = {F, C};
    e[h + "mlp.down_proj.weight"] = {C, F};
  }
  return e;
}

class HfInterop : public test::HfFolderTest {};

TEST(HfFamily, GptAndLlamaShapedConfigsMapAndOthersAreRefusedWithTheFailedConstraints) {
  EXPECT_EQ(hf_family(hf_gpt2_like(), "x.toml"), HfFamily::gpt2);
  EXPECT_EQ(hf_family(hf_llama_like(), "x.toml"), HfFamily::llama);
  ModelConfig tied_llama = hf_llama_like();
  tied_llama.tie_embeddings = true;
  tied_llama.n_kv_heads = 0;
  EXPECT_EQ(hf_family(tied_llama, "x.toml"), HfFamily::llama);

  ModelConfig mixed = hf_gpt2_like();
  mixed.norm = NormKind::rmsnorm;  // rmsnorm + learned positions: neither family
  const std::string msg = input_error_of([&] { hf_family(mixed, "ckpt/model.h5"); });
  EXPECT_CONTAINS(msg, "ckpt/model.h5");
  EXPECT_CONTAINS(msg, "GPT-2");
  EXPECT_CONTAINS(msg, "model.norm = \"layernorm\"");
  EXPECT_CONTAINS(msg, "model.position = \"rope\"");
  EXPECT_CONTAINS(msg, "model.activation = \"swiglu\"");
  EXPECT_CONTAINS(msg, "model.bias = false");

  ModelConfig gqa_gpt2 = hf_gpt2_like();
  gqa_gpt2.n_kv_heads = 2;
  EXPECT_CONTAINS(input_error_of([&] { hf_family(gqa_gpt2, "x"); }), "n_kv_heads = n_heads");
  ModelConfig untied_gpt2 = hf_gpt2_like();
  untied_gpt2.tie_embeddings = false;
  EXPECT_CONTAINS(input_error_of([&] { hf_family(untied_gpt2, "x"); }), "tie_embeddings = true");
}

TEST_F(HfInterop, Gpt2ExportHasExactlyTheHfNamesShapesAndConv1dLayout) {
  const ModelConfig m = hf_gpt2_like();
  const ParamLayout layout = gpt_param_layout(m);
  const FlatBuffer p = export_random(m, "gpt2");
  json meta;
  const auto tensors = read_raw(dir_ / "gpt2" / "model.safetensors", &meta);
  EXPECT_EQ(meta, json({{"format", "pt"}}));
  const auto want = expected_gpt2(m);
  ASSERT_EQ(tensors.size(), want.size());
  for (const auto& [name, shape] : want) {
    ASSERT_TRUE(tensors.count(name)) << name;
    EXPECT_EQ(tensors.at(name).shape, shape) << name;
  }
  const int64_t C = m.d_model;
  // c_attn.weight (C, 3C) is our qkv.weight (3C, C) transposed.
  const float* qkv = p.data() + layout.offset(layout.index_of("layers.1.attn.qkv.weight"));
  const auto& c_attn = tensors.at("transformer.h.1.attn.c_attn.weight").data;
  for (int64_t i = 0; i < C; ++i)
    for (int64_t o = 0; o < 3 * C; ++o) ASSERT_EQ(c_attn[static_cast<size_t>(i * 3 * C + o)], qkv[o * C + i]);
  // The embedding loses the padded rows (257 of 384).
  const float* wte = p.data() + layout.offset(layout.index_of("embed.wte"));
  EXPECT_EQ(0, std::memcmp(tensors.at("transformer.wte.weight").data.data(), wte, 257 * C * 4));
  const float* ln = p.data() + layout.offset(layout.index_of("layers.0.mlp_norm.bias"));
  EXPECT_EQ(0, std::memcmp(tensors.at("transformer.h.0.ln_2.bias").data.data(), ln, C * 4));
}

TEST_F(HfInterop, LlamaExportSplitsQkvAndGateUpWithoutPermutation) {
  const ModelConfig m = hf_llama_like();
  const ParamLayout layout = gpt_param_layout(m);
  const FlatBuffer p = export_random(m, "llama");
  const auto tensors = read_raw(dir_ / "llama" / "model.safetensors");
  const auto want = expected_llama(m);
  ASSERT_EQ(tensors.size(), want.size());
  for (const auto& [name, shape] : want) {
    ASSERT_TRUE(tensors.count(name)) << name;
    EXPECT_EQ(tensors.at(name).shape, shape) << name;
  }
  const int64_t C = m.d_model, KV = 2 * (C / m.n_heads), F = m.ffn_dim();
  const float* qkv = p.data() + layout.offset(layout.index_of("layers.0.attn.qkv.weight"));
  EXPECT_EQ(0, std::memcmp(tensors.at("model.layers.0.self_attn.q_proj.weight").data.data(), qkv, C * C * 4));
  EXPECT_EQ(0, std::memcmp(tensors.at("model.layers.0.self_attn.k_proj.weight").data.data(), qkv + C * C, KV * C * 4));
  EXPECT_EQ(0, std::memcmp(tensors.at("model.layers.0.self_attn.v_proj.weight").data.data(), qkv + (C + KV) * C,
                           KV * C * 4));
  const float* fc = p.data() + layout.offset(layout.index_of("layers.1.mlp.fc.weight"));
  EXPECT_EQ(0, std::memcmp(tensors.at("model.layers.1.mlp.gate_proj.weight").data.data(), fc, F * C * 4));
  EXPECT_EQ(0, std::memcmp(tensors.at("model.layers.1.mlp.up_proj.weight").data.data(), fc + F * C, F * C * 4));
  const float* head = p.data() + layout.offset(layout.index_of("lm_head.weight"));
  EXPECT_EQ(0, std::memcmp(tensors.at("lm_head.weight").data.data(), head, 257 * C * 4));
}

TEST_F(HfInterop, ConfigJsonHasTheKeysTransformersReads) {
  export_random(hf_gpt2_like(), "gpt2");
  const json g = config_of("gpt2");
  EXPECT_EQ(g["architectures"], json({"GPT2LMHeadModel"}));
  EXPECT_EQ(g["model_type"], "gpt2");
  EXPECT_EQ(g["n_embd"], 64);
  EXPECT_EQ(g["n_layer"], 2);
  EXPECT_EQ(g["n_head"], 4);
  EXPECT_EQ(g["n_positions"], 32);
  EXPECT_EQ(g["vocab_size"], 257);
  EXPECT_EQ(g["layer_norm_epsilon"], 1e-5);
  EXPECT_EQ(g["activation_function"], "gelu_new");
  EXPECT_EQ(g["tie_word_embeddings"], true);
  EXPECT_TRUE(g["n_inner"].is_null());

  export_random(hf_llama_like(), "llama");
  const json l = config_of("llama");
  EXPECT_EQ(l["architectures"], json({"LlamaForCausalLM"}));
  EXPECT_EQ(l["model_type"], "llama");
  EXPECT_EQ(l["hidden_size"], 64);
  EXPECT_EQ(l["intermediate_size"], hf_llama_like().ffn_dim());
  EXPECT_EQ(l["num_hidden_layers"], 2);
  EXPECT_EQ(l["num_attention_heads"], 4);
  EXPECT_EQ(l["num_key_value_heads"], 2);
  EXPECT_EQ(l["max_position_embeddings"], 32);
  EXPECT_EQ(l["rms_norm_eps"], 1e-6);
  EXPECT_EQ(l["rope_theta"], 500000.0);
  EXPECT_EQ(l["vocab_size"], 257);
  EXPECT_EQ(l["tie_word_embeddings"], false);
  EXPECT_EQ(l["hidden_act"], "silu");
  EXPECT_EQ(l["torch_dtype"], "float32");
}

TEST_F(HfInterop, ExportThenImportIsBitExactForBothFamilies) {
  for (const ModelConfig& m : {hf_gpt2_like(), hf_llama_like()}) {
    const std::string name = m.norm == NormKind::layernorm ? "gpt2" : "llama";
    const FlatBuffer p = export_random(m, name);
    const HfImport r = hf_import((dir_ / name).string());
    EXPECT_EQ(config_to_toml(config_for_model(r.model, "x")), config_to_toml(config_for_model(m, "x"))) << name;
    ASSERT_EQ(r.layout.total(), gpt_param_layout(m).total());
    EXPECT_EQ(0, std::memcmp(r.params.data(), p.data(), static_cast<size_t>(p.size()) * 4)) << name;
  }
}

// --dtype bf16 / fp16: every tensor stored as that dtype, each value the nearest 16-bit one to the
// float32 export's, and config.json's torch_dtype says so.
TEST_F(HfInterop, ExportsBf16AndFp16AsTheRoundedFloat32Export) {
  const ModelConfig m = hf_llama_like();
  const FlatBuffer p = export_random(m, "f32");
  const auto f32 = read_raw(dir_ / "f32" / "model.safetensors");
  for (const auto& [dtype, st, torch] : {std::tuple{Precision::bf16, "BF16", "bfloat16"},
                                         std::tuple{Precision::fp16, "F16", "float16"}}) {
    hf_export((dir_ / st).string(), m, p.data(), "test", dtype);
    const auto half = read_raw(dir_ / st / "model.safetensors", nullptr, st);
    ASSERT_EQ(half.size(), f32.size()) << st;
    for (const auto& [name, t] : f32) {
      ASSERT_EQ(half.at(name).shape, t.shape) << name;
      for (size_t i = 0; i < t.data.size(); ++i) {
        const float want = dtype == Precision::bf16 ? bf16_to_float(float_to_bf16(t.data[i]))
                                                    : fp16_to_float(float_to_fp16(t.data[i]));
        ASSERT_EQ(half.at(name).data[i], want) << st << " " << name << "[" << i << "]";
      }
    }
    EXPECT_EQ(config_of(st)["torch_dtype"], torch) << st;
  }
  EXPECT_EQ(config_of("f32")["torch_dtype"], "float32");
}

TEST_F(HfInterop, ImportsHalfPrecisionShardedAndUnprefixedFiles) {
  const ModelConfig m = hf_gpt2_like();
  const FlatBuffer p = export_random(m, "gpt2");
  // GPT2Model-style names (no "transformer."), old causal-mask buffers, two BF16/F16 shards.
  auto tensors = read_raw(dir_ / "gpt2" / "model.safetensors");
  std::vector<std::vector<uint16_t>> store;
  std::vector<SafeTensorRef> shard[2];
  json index = {{"weight_map", json::object()}};
  int k = 0;
  for (const auto& [name, t] : tensors) {
    const bool bf16 = k % 2 == 0;
    auto& h = store.emplace_back();
    for (float x : t.data) h.push_back(bf16 ? float_to_bf16(x) : float_to_fp16(x));
    const std::string short_name = name.substr(std::string("transformer.").size());
    shard[k % 2].push_back({short_name, bf16 ? "BF16" : "F16", t.shape, h.data(), h.size() * 2});
    index["weight_map"][short_name] = k % 2 ? "b.safetensors" : "a.safetensors";
    ++k;
  }
  const std::vector<uint16_t> mask(16, 0);
  shard[0].push_back({"h.0.attn.bias", "BF16", {16}, mask.data(), 32});
  fs::create_directories(dir_ / "half");
  fs::copy_file(dir_ / "gpt2" / "config.json", dir_ / "half" / "config.json");
  safetensors_write((dir_ / "half" / "a.safetensors").string(), shard[0]);
  safetensors_write((dir_ / "half" / "b.safetensors").string(), shard[1]);
  std::ofstream(dir_ / "half" / "model.safetensors.index.json") << index.dump();

  const HfImport r = hf_import((dir_ / "half").string());
  const ParamLayout layout = gpt_param_layout(m);
  const size_t wpe = layout.index_of("embed.wpe"), wte = layout.index_of("embed.wte");
  EXPECT_EQ(r.params.data()[layout.offset(wpe) + 5], bf16_to_float(float_to_bf16(p.data()[layout.offset(wpe) + 5])));
  EXPECT_EQ(r.params.data()[layout.offset(wte) + 3], fp16_to_float(float_to_fp16(p.data()[layout.offset(wte) + 3])));
  EXPECT_NEAR(r.params.data()[layout.offset(wte) + 3], p.data()[layout.offset(wte) + 3], 1e-3);
}

TEST_F(HfInterop, BadFoldersAreRefusedNamingTheFileAndTensor) {
  const ModelConfig m = hf_llama_like();
  export_random(m, "llama");
  const std::string st = (dir_ / "llama" / "model.safetensors").string();
  const std::string cfg = (dir_ / "llama" / "config.json").string();
  auto import = [&] { hf_import((dir_ / "llama").string()); };

  edit_weights("llama", [](auto& t) { t.erase("model.layers.1.mlp.up_proj.weight"); });
  std::string msg = input_error_of(import);
  EXPECT_CONTAINS(msg, st);
  EXPECT_CONTAINS(msg, "'model.layers.1.mlp.up_proj.weight' is missing");

  export_random(m, "llama");
  edit_weights("llama", [](auto& t) { t["model.layers.0.self_attn.k_proj.weight"].shape = {64, 32}; });
  msg = input_error_of(import);
  EXPECT_CONTAINS(msg, "'model.layers.0.self_attn.k_proj.weight' has shape [64, 32]");
  EXPECT_CONTAINS(msg, "[32, 64]");

  export_random(m, "llama");
  edit_weights("llama", [](auto& t) {
    t["model.layers.0.self_attn.q_norm.weight"] = RawTensor{"F32", {16}, std::vector<float>(16)};
  });
  EXPECT_CONTAINS(input_error_of(import), "unexpected tensors model.layers.0.self_attn.q_norm.weight");

  export_random(m, "llama");
  json j = config_of("llama");
  for (const auto& [key, value, expect] :
       {std::tuple{"model_type", json("bert"), "model_type \"bert\" is not supported"},
        std::tuple{"hidden_act", json("gelu"), "hidden_act = \"gelu\" is not supported"},
        std::tuple{"rope_scaling", json({{"rope_type", "llama3"}, {"factor", 8.0}}), "rope_scaling"},
        std::tuple{"attention_bias", json(true), "attention_bias = true"},
        std::tuple{"hidden_size", json("64"), "'hidden_size' must be a non-negative integer"},
        std::tuple{"num_attention_heads", json(5), "n_heads"}}) {
    json bad = j;
    bad[key] = value;
    write_config("llama", bad);
    msg = input_error_of(import);
    EXPECT_CONTAINS(msg, cfg);
    EXPECT_CONTAINS(msg, expect);
  }
  json missing = j;
  missing.erase("num_hidden_layers");
  write_config("llama", missing);
  EXPECT_CONTAINS(input_error_of(import), "'num_hidden_layers' is missing");

  fs::remove(cfg);
  EXPECT_CONTAINS(input_error_of(import), cfg);
  write_config("llama", j);
  fs::remove(st);
  EXPECT_CONTAINS(input_error_of(import), "neither model.safetensors nor model.safetensors.index.json");

  json g = {{"model_type", "gpt2"}, {"n_embd", 64}, {"n_layer", 2}, {"n_head", 4}, {"vocab_size", 257},
            {"activation_function", "gelu"}};
  write_config("g", g);
  EXPECT_CONTAINS(input_error_of([&] { hf_import((dir_ / "g").string()); }), "activation_function = \"gelu\"");
}

}  // namespace
}  // namespace megatrain
