#include "model/params.h"

#include <algorithm>
#include <cmath>

#include "kernels/rng.h"

namespace megatrain {
namespace {

int64_t round_up16(int64_t n) { return (n + 15) / 16 * 16; }

// The (rows, cols) matrix a tensor's tp split applies to: the tensor itself, or one expert's.
Shape matrix_of(const ParamSpec& s) {
  if (s.expert) return Shape{s.shape[1], s.shape[2]};
  return s.shape;
}

// Elements per row: 1 for a 1-D tensor.
int64_t row_size(const Shape& s) { return s.numel() / s[0]; }

// The shard of a part with `shards` shards that rank tp.rank holds.
int shard_of(const RowPart& p, TpCoord tp) { return tp.rank / (tp.size / p.shards); }

std::vector<RowPart> parts_of(const ParamSpec& s, TpCoord tp) {
  if (!s.parts.empty()) return s.parts;
  return {RowPart{matrix_of(s)[0], tp.size}};
}

// Global index, in matrix `m` (the tensor, or one expert's matrix), of local element e of this
// rank's view `local` of it.
int64_t matrix_global_index(const ParamSpec& s, const Shape& m, const Shape& local, TpCoord tp, int64_t e) {
  switch (s.split) {
    case TpSplit::replicated:
      return e;
    case TpSplit::cols: {
      const int64_t cols = local[1];
      return (e / cols) * m[1] + tp.rank * cols + e % cols;
    }
    case TpSplit::rows:
      break;
  }
  const int64_t inner = row_size(m);
  int64_t row = e / inner, global_first = 0;
  for (const RowPart& p : parts_of(s, tp)) {
    const int64_t mine = p.rows / p.shards;
    if (row < mine) return (global_first + shard_of(p, tp) * mine + row) * inner + e % inner;
    row -= mine;
    global_first += p.rows;
  }
  throw Error(fmt::format("{}: local element {} outside the tensor", s.name, e));
}

}  // namespace

ParamLayout::ParamLayout(std::vector<ParamSpec> specs, TpCoord tp, EpCoord ep)
    : specs_(std::move(specs)), tp_(tp), ep_(ep) {
  MT_CHECK(tp.size >= 1 && tp.rank >= 0 && tp.rank < tp.size, "tensor-parallel rank {} of {}", tp.rank, tp.size);
  MT_CHECK(ep.size >= 1 && ep.rank >= 0 && ep.rank < ep.size, "expert-parallel rank {} of {}", ep.rank, ep.size);
  for (const ParamSpec& s : specs_) {
    if (s.expert) {
      local_.push_back(expert_local_shape(s));
      offsets_.push_back(total_);
      total_ += round_up16(local_.back().numel());
      continue;
    }
    Shape local = s.shape;
    const int64_t inner = row_size(s.shape);
    if (s.split == TpSplit::cols) {
      MT_CHECK(s.shape.ndim == 2 && s.shape[1] % tp.size == 0, "{}: {} columns do not split over tp = {}", s.name,
               s.shape.ndim == 2 ? s.shape[1] : 0, tp.size);
      local = Shape{s.shape[0], s.shape[1] / tp.size};
    } else if (s.split == TpSplit::rows) {
      int64_t rows = 0, global = 0;
      for (const RowPart& p : parts_of(s, tp)) {
        MT_CHECK(p.shards >= 1 && tp.size % p.shards == 0 && p.rows % p.shards == 0,
                 "{}: a part of {} rows in {} shards does not split over tp = {}", s.name, p.rows, p.shards, tp.size);
        const int64_t mine = p.rows / p.shards;
        if (p.shards < tp.size)
          shared_.push_back(
              {FlatRange{total_ + rows * inner, total_ + (rows + mine) * inner}, tp.size / p.shards, s.partial_grad});
        rows += mine;
        global += p.rows;
      }
      MT_CHECK(global == s.shape[0], "{}: parts hold {} rows, the tensor {}", s.name, global, s.shape[0]);
      local.dim[0] = rows;
    } else if (tp.size > 1) {
      shared_.push_back({FlatRange{total_, total_ + s.shape.numel()}, tp.size, s.partial_grad});
    }
    local_.push_back(local);
    offsets_.push_back(total_);
    total_ += round_up16(local.numel());
  }
  // Merge neighbours separated only by alignment padding (zeros on every rank): fewer reductions.
  std::vector<SharedRange> merged;
  for (const SharedRange& r : shared_) {
    if (!merged.empty() && merged.back().sharers == r.sharers && merged.back().partial_grad == r.partial_grad &&
        round_up16(merged.back().range.end) >= r.range.begin)
      merged.back().range.end = r.range.end;
    else
      merged.push_back(r);
  }
  shared_ = std::move(merged);
  std::vector<FlatRange> skip;
  for (const SharedRange& r : shared_)
    if (tp_.rank % r.sharers != 0) skip.push_back(r.range);
  for (size_t i = 0; i < specs_.size(); ++i)
    if (specs_[i].tied_copy) skip.push_back({offsets_[i], offsets_[i] + local_[i].numel()});
  std::sort(skip.begin(), skip.end(), [](const FlatRange& a, const FlatRange& b) { return a.begin < b.begin; });
  int64_t from = 0;
  for (const FlatRange& r : skip) {
    if (from < r.begin) owned_.push_back({from, r.begin});
    from = std::max(from, r.end);
  }
  if (from < total_) owned_.push_back({from, total_});
}

Shape ParamLayout::expert_local_shape(const ParamSpec& s) const {
  MT_CHECK(s.shape.ndim == 3 && s.shape[0] % ep_.size == 0, "{}: {} experts do not split over ep = {}", s.name,
           s.shape[0], ep_.size);
  Shape local{s.shape[0] / ep_.size, s.shape[1], s.shape[2]};
  if (s.split == TpSplit::cols) {
    MT_CHECK(s.shape[2] % tp_.size == 0, "{}: {} columns do not split over tp = {}", s.name, s.shape[2], tp_.size);
    local.dim[2] /= tp_.size;
  } else if (s.split == TpSplit::rows) {
    int64_t rows = 0;
    for (const RowPart& p : parts_of(s, tp_)) {
      MT_CHECK(p.shards == tp_.size && p.rows % p.shards == 0, "{}: a part of {} rows does not split over tp = {}",
               s.name, p.rows, tp_.size);
      rows += p.rows / p.shards;
    }
    local.dim[1] = rows;
  } else {
    MT_CHECK(tp_.size == 1, "{}: an expert tensor is split over tp, never shared", s.name);
  }
  return local;
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

int64_t ParamLayout::global_index(size_t i, int64_t e) const {
  const ParamSpec& s = specs_[i];
  if (!s.expert) return matrix_global_index(s, s.shape, local_[i], tp_, e);
  const Shape m = matrix_of(s), local{local_[i][1], local_[i][2]};
  const int64_t per = local.numel(), expert = ep_.rank * local_[i][0] + e / per;
  return expert * m.numel() + matrix_global_index(s, m, local, tp_, e % per);
}

LocalDims local_dims(const ModelConfig& cfg, TpCoord tp) {
  LocalDims d;
  d.heads = cfg.n_heads / tp.size;
  d.kv_heads = cfg.kv_heads() >= tp.size ? cfg.kv_heads() / tp.size : 1;
  d.ffn = cfg.ffn_dim() / tp.size;
  d.vocab = cfg.padded_vocab(tp.size) / tp.size;
  d.vocab_begin = tp.rank * d.vocab;
  d.vocab_valid = std::clamp(cfg.vocab_size - d.vocab_begin, 0, d.vocab);
  return d;
}

ParamLayout gpt_param_layout(const ModelConfig& cfg, TpCoord tp, bool sequence_parallel,
                             const std::vector<StageRange>& chunks, EpCoord ep) {
  bool embedding = false, head = false;
  for (const StageRange& range : chunks) {
    MT_CHECK(range.first_layer >= 0 && range.layers >= 0 && range.first_layer + range.layers <= cfg.n_layers,
             "stage blocks [{}, {}) outside the model's {}", range.first_layer, range.first_layer + range.layers,
             cfg.n_layers);
    embedding |= range.embedding;
    head |= range.head;
  }
  const int64_t C = cfg.d_model, D = cfg.head_dim(), H = cfg.n_heads, Hkv = cfg.kv_heads();
  const int64_t F = cfg.ffn_dim(), Vp = cfg.padded_vocab(tp.size);
  const int kv_shards = static_cast<int>(std::min<int64_t>(Hkv, tp.size));
  const std::vector<RowPart> qkv_parts{{H * D, tp.size}, {Hkv * D, kv_shards}, {Hkv * D, kv_shards}};
  const std::vector<RowPart> fc_parts = cfg.activation == ActivationKind::swiglu
                                            ? std::vector<RowPart>{{F, tp.size}, {F, tp.size}}
                                            : std::vector<RowPart>{{F, tp.size}};
  std::vector<ParamSpec> p;
  auto norm = [&](const std::string& prefix) {
    ParamSpec w{prefix + ".weight", Shape{C}, TpSplit::replicated, {}, ParamGroup::norm, InitKind::ones};
    w.partial_grad = sequence_parallel;
    p.push_back(w);
    if (cfg.bias && cfg.norm == NormKind::layernorm) {
      w.name = prefix + ".bias";
      w.group = ParamGroup::bias;
      w.init = InitKind::zeros;
      p.push_back(w);
    }
  };
  // Column-parallel: output rows split (by parts); row-parallel: input columns split, bias replicated.
  auto column = [&](const std::string& prefix, int64_t in, const std::vector<RowPart>& parts, bool partial, bool bias) {
    int64_t out = 0;
    for (const RowPart& r : parts) out += r.rows;
    ParamSpec w{prefix + ".weight", Shape{out, in}, TpSplit::rows, parts, ParamGroup::matrix, InitKind::normal};
    w.partial_grad = partial;
    p.push_back(w);
    if (bias)
      p.push_back({prefix + ".bias", Shape{out}, TpSplit::rows, parts, ParamGroup::bias, InitKind::zeros, -1, partial});
  };
  auto row = [&](const std::string& prefix, int64_t out, int64_t in) {
    p.push_back({prefix + ".weight", Shape{out, in}, TpSplit::cols, {}, ParamGroup::matrix, InitKind::normal_residual});
    if (cfg.bias)
      p.push_back({prefix + ".bias", Shape{out}, TpSplit::replicated, {}, ParamGroup::bias, InitKind::zeros});
  };
  // An MoE block's router (replicated: every tp rank routes the same full rows) and its experts'
  // FC (column-parallel per expert, [gate | up] for SwiGLU) and projection (row-parallel), no biases.
  const int64_t E = cfg.moe.n_experts, Fe = cfg.expert_ffn_dim();
  const std::vector<RowPart> expert_parts = cfg.activation == ActivationKind::swiglu
                                                ? std::vector<RowPart>{{Fe, tp.size}, {Fe, tp.size}}
                                                : std::vector<RowPart>{{Fe, tp.size}};
  auto moe = [&](const std::string& prefix) {
    p.push_back(
        {prefix + ".router.weight", Shape{E, C}, TpSplit::replicated, {}, ParamGroup::matrix, InitKind::normal});
    if (cfg.moe.aux_free_bias > 0.0f)
      p.push_back({prefix + ".router.bias", Shape{E}, TpSplit::replicated, {}, ParamGroup::state, InitKind::zeros});
    // The dense branch beside the experts (model/moe_dense_branch.h): tp-split like the MLP, no biases.
    const int64_t Fd = cfg.moe.dense_branch_units(static_cast<int>(Fe));
    if (Fd > 0) {
      std::vector<RowPart> parts(expert_parts.size(), RowPart{Fd, tp.size});
      p.push_back({prefix + ".shared.fc.weight", Shape{Fd * static_cast<int64_t>(parts.size()), C}, TpSplit::rows,
                   parts, ParamGroup::matrix, InitKind::normal});
      p.push_back({prefix + ".shared.proj.weight",
                   Shape{C, Fd},
                   TpSplit::cols,
                   {},
                   ParamGroup::matrix,
                   InitKind::normal_residual});
    }
    if (cfg.moe.residual)
      p.push_back(
          {prefix + ".coef.weight", Shape{2, C}, TpSplit::replicated, {}, ParamGroup::matrix, InitKind::normal});
    ParamSpec fc{prefix + ".experts.fc.weight",
                 Shape{E, Fe * static_cast<int64_t>(expert_parts.size()), C},
                 TpSplit::rows,
                 expert_parts,
                 ParamGroup::matrix,
                 InitKind::normal};
    fc.expert = true;
    p.push_back(fc);
    ParamSpec proj{prefix + ".experts.proj.weight", Shape{E, C, Fe}, TpSplit::cols, {}, ParamGroup::matrix,
                   InitKind::normal_residual};
    proj.expert = true;
    p.push_back(proj);
  };
  p.push_back({"embed.wte", Shape{Vp, C}, TpSplit::rows, {}, ParamGroup::embedding, InitKind::normal, cfg.vocab_size});
  if (cfg.position == PositionKind::learned)
    p.push_back({"embed.wpe",
                 Shape{cfg.max_seq_len, C},
                 TpSplit::replicated,
                 {},
                 ParamGroup::embedding,
                 InitKind::normal,
                 -1,
                 sequence_parallel});
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string L = "layers." + std::to_string(l);
    norm(L + ".attn_norm");
    // Key/value heads shared by several tp ranks (kv_shards < tp) get partial gradients on each.
    column(L + ".attn.qkv", C, qkv_parts, kv_shards < tp.size, cfg.bias || cfg.qkv_bias);
    row(L + ".attn.proj", C, H * D);
    norm(L + ".mlp_norm");
    if (cfg.moe.is_moe_layer(l)) {
      moe(L + ".moe");
      continue;
    }
    column(L + ".mlp.fc", C, fc_parts, false, cfg.bias);
    row(L + ".mlp.proj", C, F);
  }
  norm("final_norm");
  if (!cfg.tie_embeddings)
    p.push_back(
        {"lm_head.weight", Shape{Vp, C}, TpSplit::rows, {}, ParamGroup::matrix, InitKind::normal, cfg.vocab_size});
  // Keep the chunks' tensors (blocks by their layer, the rest by position), each with its stream;
  // expert tensors go after all the others ([Note: expert tensors]).
  std::vector<ParamSpec> mine, experts;
  for (size_t i = 0; i < p.size(); ++i) {
    ParamSpec& s = p[i];
    s.init_stream = static_cast<int>(i);
    bool keep = false;
    if (s.name.starts_with("embed."))
      keep = embedding;
    else if (s.name.starts_with("layers.")) {
      const int l = std::stoi(s.name.substr(7));
      for (const StageRange& range : chunks) keep |= l >= range.first_layer && l < range.first_layer + range.layers;
    } else
      keep = head;
    if (keep) (s.expert ? experts : mine).push_back(std::move(s));
  }
  if (head && cfg.tie_embeddings && !embedding) {
    mine.push_back(p.front());  // embed.wte, stream 0
    mine.back().tied_copy = true;
  }
  mine.insert(mine.end(), std::make_move_iterator(experts.begin()), std::make_move_iterator(experts.end()));
  return ParamLayout(std::move(mine), tp, ep);
}

void init_params(const ParamLayout& layout, float* params, const ModelConfig& cfg, uint64_t seed) {
  init_params_range(layout, params, FlatRange{0, layout.total()}, cfg, seed);
}

void init_params_range(const ParamLayout& layout, float* data, FlatRange range, const ModelConfig& cfg, uint64_t seed) {
  const float residual_std = cfg.init_std / std::sqrt(2.0f * static_cast<float>(cfg.n_layers));
  for (size_t i = 0; i < layout.size(); ++i) {
    const ParamSpec& s = layout.spec(i);
    const int64_t off = layout.offset(i), n = layout.local_shape(i).numel();
    const FlatRange mine = flat_intersect(range, FlatRange{off, off + n});
    float* w = data + (mine.begin - range.begin);
    const int64_t first = mine.begin - off;  // local element index inside the tensor
    if (s.init == InitKind::ones || s.init == InitKind::zeros) {
      const float v = s.init == InitKind::ones ? 1.0f : 0.0f;
      for (int64_t e = 0; e < mine.size(); ++e) w[e] = v;
      continue;
    }
    const float std = s.init == InitKind::normal_residual ? residual_std : cfg.init_std;
    const int stream = s.init_stream >= 0 ? s.init_stream : static_cast<int>(i);
    const RngKey key{seed, static_cast<uint32_t>(RngPurpose::init), static_cast<uint32_t>(stream), 0};
    const int64_t valid = s.valid_rows < 0 ? s.shape.numel() : s.valid_rows * row_size(s.shape);
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < mine.size(); ++e) {
      const int64_t g = layout.global_index(i, first + e);
      w[e] = g < valid ? rng_normal(key, static_cast<uint64_t>(g)) * std : 0.0f;
    }
  }
}

int64_t dense_end(const ParamLayout& layout) {
  for (size_t i = 0; i < layout.size(); ++i)
    if (layout.spec(i).expert) return layout.offset(i);
  return layout.total();
}

std::vector<FlatRange> gpt_param_units(const ParamLayout& layout, const StageRange& range) {
  std::vector<int64_t> starts;
  if (range.embedding) starts.push_back(0);
  for (int l = range.first_layer; l < range.first_layer + range.layers; ++l)
    starts.push_back(layout.offset(layout.index_of("layers." + std::to_string(l) + ".attn_norm.weight")));
  if (range.head) starts.push_back(layout.offset(layout.index_of("final_norm.weight")));
  // The end: the first tensor after the last block's dense tensors, if any, else the experts'.
  size_t after = layout.size();
  if (!range.head && range.layers > 0) {
    const std::string last = "layers." + std::to_string(range.first_layer + range.layers - 1) + ".";
    for (size_t i = 0; i < layout.size(); ++i)
      if (layout.spec(i).name.starts_with(last) && !layout.spec(i).expert) after = i + 1;
  }
  starts.push_back(after < layout.size() ? layout.offset(after) : layout.total());
  starts.back() = std::min(starts.back(), dense_end(layout));
  std::vector<FlatRange> units;
  for (size_t u = 0; u + 1 < starts.size(); ++u) units.push_back({starts[u], starts[u + 1]});
  return units;
}

std::vector<FlatRange> moe_expert_units(const ParamLayout& layout, const std::vector<StageRange>& chunks) {
  std::vector<int64_t> starts;
  for (const StageRange& range : chunks)
    for (int l = range.first_layer; l < range.first_layer + range.layers; ++l) {
      const std::string fc = "layers." + std::to_string(l) + ".moe.experts.fc.weight";
      if (layout.contains(fc)) starts.push_back(layout.offset(layout.index_of(fc)));
    }
  MT_CHECK(starts.empty() || starts.front() == dense_end(layout), "expert tensors out of order in the layout");
  starts.push_back(layout.total());
  std::vector<FlatRange> units;
  for (size_t u = 0; u + 1 < starts.size(); ++u) units.push_back({starts[u], starts[u + 1]});
  return units;
}

std::vector<FlatRange> gpt_param_units(const ParamLayout& layout, const std::vector<StageRange>& chunks) {
  std::vector<FlatRange> units;
  for (const StageRange& range : chunks) {
    const std::vector<FlatRange> mine = gpt_param_units(layout, range);
    MT_CHECK(units.empty() || mine.front().begin == units.back().end, "model chunks out of order in the layout");
    units.insert(units.end(), mine.begin(), mine.end());
  }
  return units;
}

}  // namespace megatrain
