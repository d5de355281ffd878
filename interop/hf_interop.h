// Interop with Hugging Face transformers: a megatrain model ↔ a model folder holding config.json and
// model.safetensors. Three families map: GPT-2 (layernorm, learned positions, gelu, bias, tied
// embeddings, no GQA) ↔ GPT2LMHeadModel, Llama (rmsnorm, rope, swiglu, no bias) ↔
// LlamaForCausalLM, Qwen2 / Qwen2.5 (Llama with a bias on q, k and v) ↔ Qwen2ForCausalLM, and
// Mixtral (Llama with every block MoE: softmax router, top-k ≥ 2, no shared or residual experts, no
// aux-free bias, no RoPE scaling) ↔ MixtralForCausalLM. Llama and Qwen2 carry RoPE scaling
// (linear, llama3, yarn: model.rope_scaling). Mixtral in transformers is dropless,
// so an exported MoE model routes dropless whatever capacity_factor it trained with; capacity, drop
// policy and the aux / z loss weights are training settings that do not change the weights. One
// table (hf_tensor_map) says where every Hugging Face tensor lives in our flat parameter buffer,
// and both directions walk it, so export and import cannot disagree.
// Invariant: export then import gives back every parameter bit for bit (the padded vocabulary rows,
// which are not exported, come back as zeros); every problem with a model folder is an DataError
// naming the file and the key or tensor.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "kernels/device.h"
#include "model/params.h"
#include "interop/safetensors.h"

namespace megatrain {

enum class HfFamily { gpt2, llama, qwen2, mixtral };

// The transformers class of a family: "GPT2LMHeadModel", "LlamaForCausalLM", "Qwen2ForCausalLM",
// "MixtralForCausalLM".
const char* hf_architecture(HfFamily family);

// The family `m` exports as. Anything else is an DataError naming `source` and listing, for each
// family that could hold it (GPT-2, Llama and Qwen2 for a dense model, Mixtral for an MoE one), the
// constraints `m` fails.
HfFamily hf_family(const ModelConfig& m, const std::string& source);

// One Hugging Face tensor and where it lives in our buffer: rows [row0, row0 + rows) of our
// parameter `ours` (all its columns), transposed when HF stores it (in, out) (GPT-2's Conv1D). Rows
// count over the tensor viewed as (numel / last dim, last dim): in an expert tensor (E, R, cols),
// expert i's row r is row i·R + r.
struct HfTensorMap {
  std::string hf_name;
  std::string ours;
  int64_t row0 = 0, rows = 0, cols = 0;  // cols = 0: a 1-d tensor of `rows` elements
  bool transpose = false;
  std::vector<int64_t> hf_shape() const;
};

// Every tensor of the family's Hugging Face checkpoint, in file order (GPT-2 names carry the
// "transformer." prefix of GPT2LMHeadModel; Mixtral splits each expert into its own w1 / w3 / w2).
std::vector<HfTensorMap> hf_tensor_map(const ModelConfig& m, HfFamily family);

// config.json of `m` (transformers reads it with AutoConfig) for weights stored as `dtype`
// (torch_dtype); hf_config.cpp.
nlohmann::json hf_config_json(const ModelConfig& m, HfFamily family, Precision dtype = Precision::fp32);
// The model described by a config.json (keys transformers would default are defaulted likewise;
// the fields HF has no word for keep megatrain's defaults), checked by validate_model_config.
// DataError naming `source` and the key.
ModelConfig hf_model_config(const nlohmann::json& config, const std::string& source);

// Writes OUT_DIR/config.json and OUT_DIR/model.safetensors for `params`, which follows
// gpt_param_layout(m): F32, or each value rounded to BF16 / F16 (nearest, ties to even) as `dtype`
// asks. Creates OUT_DIR; replaces both files atomically.
void hf_export(const std::string& out_dir, const ModelConfig& m, const float* params, const std::string& source,
               Precision dtype = Precision::fp32);

// The tensors of a model folder: model.safetensors, or the shards model.safetensors.index.json lists.
class HfWeights {
 public:
  static HfWeights open(const std::string& dir);
  // The tensor's description and file; nullptr when no file has it.
  const TensorInfo* find(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;
  void read_f32(const std::string& name, std::span<float> out) const;  // F32, BF16 or F16
  std::vector<std::string> names() const;
  const std::string& source() const { return source_; }  // model.safetensors or the index, for messages

 private:
  std::string source_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> where_;  // tensor name → index in files_
};

struct HfImport {
  ModelConfig model;
  ParamLayout layout;  // gpt_param_layout(model)
  FlatBuffer params;   // padded vocabulary rows are zero
};

// Reads DIR/config.json and DIR's weights.
HfImport hf_import(const std::string& dir);

}  // namespace megatrain
