// The parameter table: one ParamSpec per tensor (name, global shape, split dim, decay, init),
// laid out back to back in one flat buffer (offsets 64-byte aligned). Parameters, gradients and
// optimizer state all share this layout, so a gradient bucket or a ZeRO shard is an
// (offset, size) range and a tensor's view is derived from the spec alone.
#pragma once
#include <string>
#include <vector>

#include "kernels/flat_buffer.h"
#include "kernels/tensor.h"
#include "model/config.h"
#include "parallel/unit_state.h"

namespace megatrain {

enum class WeightDecay { apply, skip };
enum class ParamGroup { embedding, norm, bias, matrix };
enum class InitKind { normal, normal_residual, ones, zeros };

struct ParamSpec {
  std::string name;     // e.g. "layers.3.attn.qkv.weight"
  Shape shape;          // global shape
  int split_dim = -1;   // dimension tensor parallelism splits (−1 = replicated)
  ParamGroup group = ParamGroup::matrix;
  InitKind init = InitKind::normal;
  int valid_rows = -1;  // rows beyond this are padding and initialised to zero (padded vocab); −1 = all
};

class ParamLayout {
 public:
  ParamLayout() = default;
  explicit ParamLayout(std::vector<ParamSpec> specs);

  size_t size() const { return specs_.size(); }
  const ParamSpec& spec(size_t i) const { return specs_[i]; }
  int64_t offset(size_t i) const { return offsets_[i]; }
  int64_t total() const { return total_; }  // floats, including alignment padding
  int64_t num_parameters() const;           // sum of numel, no padding
  size_t index_of(const std::string& name) const;
  bool contains(const std::string& name) const;
  Tensor view(float* base, size_t i) const { return Tensor(base + offsets_[i], specs_[i].shape); }
  // Spec i's view in a buffer holding only the flat range starting at `data_begin` (data[j] is flat
  // element data_begin + j); the spec must lie inside that buffer.
  Tensor view_in(float* data, int64_t data_begin, size_t i) const {
    return Tensor(data + (offsets_[i] - data_begin), specs_[i].shape);
  }

 private:
  std::vector<ParamSpec> specs_;
  std::vector<int64_t> offsets_;
  int64_t total_ = 0;
};

// The parameters of the GPT decoder described by `cfg` (whole model: one stage at pp = 1).
ParamLayout gpt_param_layout(const ModelConfig& cfg);

// The units of gpt_param_layout (parallel/unit_state.h), which cover [0, total()) back to back:
// unit 0 = the embeddings, unit 1 + l = block l, unit n_layers + 1 = the final norm and the
// untied head.
std::vector<FlatRange> gpt_param_units(const ParamLayout& layout, const ModelConfig& cfg);

// Deterministic initialisation: element e of parameter p is rng_normal(seed, init, p, e) · std
// (std / √(2·n_layers) for residual projections, GPT-2), ones for norm weights, zeros for biases.
void init_params(const ParamLayout& layout, float* params, const ModelConfig& cfg, uint64_t seed);
// The same values for the flat range `range` only, into data (data[j] = flat element range.begin + j);
// alignment padding inside the range is left untouched.
void init_params_range(const ParamLayout& layout, float* data, FlatRange range, const ModelConfig& cfg, uint64_t seed);

}  // namespace megatrain
