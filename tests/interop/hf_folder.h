// What the Hugging Face interop tests share (test_hf_interop.cpp, test_hf_mixtral.cpp): small
// GPT-2- and Llama-shaped configs, random parameters as training leaves them, a safetensors reader
// written from the format description alone (so the exported files are not read back by the code
// that wrote them), and a fixture that exports into and edits model folders of a temporary folder.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "interop/hf_interop.h"
#include "kernels/half.h"
#include "tests/temp_dir.h"

namespace megatrain::test {

inline ModelConfig hf_gpt2_like() {
  ModelConfig m;
  m.n_layers = 2;
  m.d_model = 64;
  m.n_heads = 4;
  m.vocab_size = 257;
  m.max_seq_len = 32;
  m.dropout = 0.1f;
  return m;
}

inline ModelConfig hf_llama_like() {
  ModelConfig m = hf_gpt2_like();
  m.norm = NormKind::rmsnorm;
  m.position = PositionKind::rope;
  m.activation = ActivationKind::swiglu;
  m.n_kv_heads = 2;
  m.bias = false;
  m.tie_embeddings = false;
  m.dropout = 0.0f;
  m.norm_eps = 1e-6f;
  m.rope_theta = 500000.0f;
  return m;
}

// Random parameters with the padded vocabulary rows zero, as training leaves them.
inline FlatBuffer random_params(const ModelConfig& m, const ParamLayout& layout) {
  FlatBuffer p(layout.total());
  init_params(layout, p.data(), m, 7);
  for (size_t i = 0; i < layout.size(); ++i)  // norms and biases away from 1 and 0
    if (layout.spec(i).init == InitKind::ones || layout.spec(i).init == InitKind::zeros)
      for (int64_t e = 0; e < layout.spec(i).shape.numel(); ++e) p.data()[layout.offset(i) + e] += 0.001f * (e % 7);
  return p;
}

// A safetensors reader written from the format description alone, sharing no code with the trainer.
struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<float> data;  // F32, or BF16 / F16 values widened
};
// Every tensor must have dtype `want` (F32, BF16 or F16).
inline std::map<std::string, RawTensor> read_raw(const std::filesystem::path& path, nlohmann::json* metadata = nullptr,
                                                 const std::string& want = "F32") {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  EXPECT_LE(8 + n, bytes.size());
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  const size_t data_size = bytes.size() - 8 - n;
  std::map<std::string, RawTensor> out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") {
      if (metadata) *metadata = t;
      continue;
    }
    RawTensor r;
    r.dtype = t.at("dtype").get<std::string>();
    r.shape = t.at("shape").get<std::vector<int64_t>>();
    const uint64_t begin = t.at("data_offsets")[0], end = t.at("data_offsets")[1];
    ranges.emplace_back(begin, end);
    int64_t numel = 1;
    for (int64_t d : r.shape) numel *= d;
    EXPECT_EQ(r.dtype, want) << name;
    const uint64_t size = want == "F32" ? 4 : 2;
    EXPECT_EQ(end - begin, static_cast<uint64_t>(numel) * size) << name;
    r.data.resize(static_cast<size_t>(numel));
    if (end <= data_size && size == 4) std::memcpy(r.data.data(), bytes.data() + 8 + n + begin, end - begin);
    for (size_t i = 0; end <= data_size && size == 2 && i < r.data.size(); ++i) {
      uint16_t bits = 0;
      std::memcpy(&bits, bytes.data() + 8 + n + begin + 2 * i, 2);
      r.data[i] = want == "BF16" ? bf16_to_float(bits) : fp16_to_float(bits);
    }
    out[name] = std::move(r);
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (const auto& [begin, end] : ranges) {
    EXPECT_EQ(begin, at) << "gap or overlap";
    at = end;
  }
  EXPECT_EQ(at, data_size) << "the offsets must cover the data section exactly";
  return out;
}

class HfFolderTest : public ::testing::Test {
 protected:
  // Exports random parameters of `m` to dir_/NAME; returns them.
  FlatBuffer export_random(const ModelConfig& m, const std::string& name) {
    const ParamLayout layout = gpt_param_layout(m);
    FlatBuffer p = random_params(m, layout);
    hf_export((dir_ / name).string(), m, p.data(), "test");
    return p;
  }
  nlohmann::json config_of(const std::string& name) {
    std::ifstream in(dir_ / name / "config.json");
    return nlohmann::json::parse(in);
  }
  void write_config(const std::string& name, const nlohmann::json& j) {
    std::filesystem::create_directories(dir_ / name);
    std::ofstream(dir_ / name / "config.json") << j.dump(2);
  }
  // Rewrites dir_/NAME/model.safetensors through `edit` (name → tensor, F32 data as written).
  void edit_weights(const std::string& name, const std::function<void(std::map<std::string, RawTensor>&)>& edit) {
    auto tensors = read_raw(dir_ / name / "model.safetensors");
    edit(tensors);
    std::vector<SafeTensorRef> refs;
    for (const auto& [n, t] : tensors) refs.push_back({n, "F32", t.shape, t.data.data(), t.data.size() * 4});
    safetensors_write((dir_ / name / "model.safetensors").string(), refs);
  }

  TempDir dir_{"hf"};
};

}  // namespace megatrain::test
