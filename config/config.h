// The typed run configuration: one TOML file (+ --set overrides) → Config, strictly validated.
// Invariant: a Config returned by load_config has only known keys of the right types and passes the
// single-field rules; after resolve_config it also passes the cross-field rules and its derived
// values (parallel.dp, train.global_batch_size, optimizer.decay_steps) are filled in (never 0).
// Every error is an InputError naming the file, the key and the fix. Keys: README, "Config reference".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "health/health_options.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "model/recompute.h"
#include "optim/compress/grad_compression.h"
#include "parallel/context_parallel.h"

namespace megatrain {

enum class DecayKind { cosine, linear, constant, wsd };
// The shape of a WSD schedule's final decay (Megatron-LM's --lr-wsd-decay-style).
enum class WsdShape { linear, cosine, exponential, minus_sqrt };

struct ParallelConfig {
  int tp = 1, pp = 1, cp = 1;
  CpComm cp_comm = CpComm::ring;  // ring | all_to_all: how a cp group attends (model/ring_attention.h, model/ulysses_attention.h)
  int ep = 1;  // expert-parallel ranks inside each data-parallel group (Megatron's expert-model-parallel-size)
  int dp = 0;  // 0 = world / (tp·cp·pp) (parallel/groups.h resolve_dims); a multiple of ep
  int zero_stage = 0;               // 0 | 1 | 2 | 3 (optim/zero_plan.h)
  double bucket_size_mb = 25.0;     // gradient bucket size for the data-parallel reduction
  bool overlap_grad_reduce = true;  // start each bucket's reduction during backward
  bool sequence_parallel = false;   // norms, dropout and residuals on N/tp rows (parallel/mappings.h)
  bool overlap_tp_comm = true;      // reduce column-parallel input gradients during the weight GEMM
  std::string pipeline_schedule = "1f1b";  // gpipe | 1f1b | interleaved | zero_bubble (parallel/pipeline_schedule.h)
  int virtual_stages = 1;                  // model chunks per pipeline rank (interleaved)
  std::vector<int> pipeline_layers;        // blocks per virtual stage; empty = n_layers / (pp·virtual_stages) each
  Precision grad_reduce_dtype = Precision::fp32;  // fp32 | bf16: the data-parallel reduction (optim/zero_plan.h)
  // none | powersgd | onebit (optim/compress/grad_compression.h)
  GradCompression grad_compression = GradCompression::none;
  int powersgd_rank = 4;                                      // PowerSGD's rank r
  int max_staleness = 0;  // stale-synchronous data parallelism: apply step t − s's gradients (optim/zero_plan.h)
  // ZeRO++ ([Note: ZeRO++] in optim/zero_plan.h), DeepSpeed's names: qwZ, qgZ, hpZ and their int8 block.
  bool zero_quantized_weights = false;
  bool zero_quantized_gradients = false;
  int zero_hpz_partition_size = 1;  // 1 = off
  int zero_quant_block = 256;
  friend bool operator==(const ParallelConfig&, const ParallelConfig&) = default;
};

struct TrainConfig {
  int seq_len = 128;
  int micro_batch_size = 4;
  int global_batch_size = 0;  // 0 = micro_batch_size·dp
  int64_t steps = 100;
  uint64_t seed = 1234;
  int eval_interval = 0;  // 0 = never
  int eval_steps = 10;
  // bf16 | fp16: the linear layers multiply 16-bit roundings of weights and activations, float32
  // sums; master weights, gradients, optimizer state, norms, softmax and loss stay float32. fp16
  // scales the loss dynamically (trainer/loss_scaler.h, the [loss_scale] section).
  Precision precision = Precision::fp32;
  // Where each rank computes: "cpu", or "cuda" (one GPU per rank, chosen by its local rank; the
  // communicators move device buffers through NCCL). trainer/rank_run.h [Note: a run on a device].
  Device device = Device::cpu;
  // On train.device = "cuda": the attention kernels, "auto", "flash" or "cudnn" (kernels/ops.h).
  AttentionImpl attention_backend = AttentionImpl::automatic;
  Recompute recompute = Recompute::none;  // model/recompute.h
  int recompute_layers = 0;               // full: blocks per stage, from its first; 0 = all
  // bf16 on a CPU: the GEMM-facing activations kept in bf16 (model/attention_parts.h [Note: activation
  // dtype]); false keeps them float32, as context parallelism and the device kernels do — the
  // like-with-like reference for those.
  bool bf16_activations = true;
  // Stop early, after a save, with exit code 10 (trainer/stop_request.h); 0 = never.
  double exit_duration_mins = 0.0;        // wall minutes since this run started
  int64_t exit_after_steps = 0;           // steps of this run
  // fp32/bf16: a step whose gradients hold Inf/NaN is skipped; this many in a row stop the run
  // (exit code 76). fp16 overflows are the loss scaler's (loss_scale).
  int64_t max_consecutive_skips = 5;
  // Megatron's --rampup-batch-size: [start, increment, samples] — the global batch grows from start
  // by increment over the first `samples` samples, then stays global_batch_size
  // (data/batch_sizes.h); empty = constant. The schedule's step counts then name the samples the
  // run has consumed by that step (trainer/lr_schedule.h).
  std::vector<int64_t> rampup_batch_size;
  friend bool operator==(const TrainConfig&, const TrainConfig&) = default;
};

struct OptimizerConfig {
  float lr = 3e-4f, min_lr = 3e-5f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f,
        grad_clip = 1.0f;  // grad_clip 0 = no clipping
  int64_t warmup_steps = 0;
  DecayKind decay = DecayKind::cosine;
  int64_t decay_steps = 0;  // 0 = train.steps
  // decay = "wsd": warmup, constant lr, then the last wsd_decay_steps of the decay steps fall to
  // min_lr in wsd_decay_style's shape (trainer/lr_schedule.h). Needed (> 0) by wsd, refused otherwise.
  int64_t wsd_decay_steps = 0;
  WsdShape wsd_decay_style = WsdShape::linear;
  bool decay_embeddings = false;
  bool decay_norms_and_biases = false;
  // AdamW's moments between steps: fp32, or bf16 (computed in float32 inside the update, stored
  // rounded: kernels/cpu/adamw.cpp [Note: 16-bit moments]); checkpoints hold them as float32.
  Precision state_dtype = Precision::fp32;
  friend bool operator==(const OptimizerConfig&, const OptimizerConfig&) = default;
};

// One dataset of a blend: PREFIX of PREFIX.bin/.idx (relative to the working directory) and its
// weight (> 0; a blend's weights are normalised to sum 1).
struct WeightedPrefix {
  double weight = 1.0;
  std::string prefix;
  friend bool operator==(const WeightedPrefix&, const WeightedPrefix&) = default;
};

// data.train / data.valid: a prefix string (one entry of weight 1) or [[weight, "prefix"], …];
// empty = none (valid: no separate validation set).
struct DataConfig {
  std::vector<WeightedPrefix> train;
  std::vector<WeightedPrefix> valid;
  std::string split;      // "98,1,1": documents split train/valid/test; "" = off (data/doc_split.h)
  bool shuffle = true;
  std::string cache_dir;  // sample-index cache; "" = PREFIX.megatrain-cache next to the first prefix
  // Documents packed in a sample (data/packed_documents.h; Megatron's --reset-position-ids,
  // --reset-attention-mask, --eod-mask-loss): positions restart after each end-of-document token,
  // attention stays within each document, the position whose input is that token is not learned.
  // eod_token: the end-of-document id preprocess appended (README "Documents in a sample"); -1 = unset.
  bool reset_position_ids = false, reset_attention_mask = false, eod_mask_loss = false;
  int64_t eod_token = -1;
  // true: documents packed into samples of seq_len + 1 tokens; false: one document a sample,
  // padded (padding not learned) or cut to seq_len + 1 tokens (data/gpt_sample_index.h).
  bool pack = true;
  friend bool operator==(const DataConfig&, const DataConfig&) = default;
};

struct CheckpointConfig {
  std::string dir;
  int64_t save_interval = 0;  // 0 = never
  int keep_last = 0;          // 0 = keep all
  std::string load;           // "" = start from scratch
  bool async = false;
  std::string on_save_fail = "continue";  // a failed save: "continue" training, or "exit" with code 75
  // Memory snapshots (trainer/memory_snapshots.h): every memory_interval steps (0 = never) into
  // memory_dir ("" = /dev/shm/megatrain/<checkpoint.dir as a name>) on this host and a buddy host,
  // keeping the newest memory_keep.
  int64_t memory_interval = 0;
  std::string memory_dir;
  int memory_keep = 2;
  friend bool operator==(const CheckpointConfig&, const CheckpointConfig&) = default;
};

// log.peak_tflops: "auto" = measured at start-up (trainer/peak_flops.h), or a number: the per-rank
// peak in TFLOP/s (a GPU's datasheet dense peak); 0 = MFU not reported.
struct PeakTflops {
  bool automatic = true;
  double value = 0.0;  // when not automatic
  friend bool operator==(const PeakTflops&, const PeakTflops&) = default;
};

struct LogConfig {
  int interval = 10;
  std::string metrics_file;  // "" = none
  std::string samples_file;  // "" = none: the sample log (trainer/sample_log.h)
  PeakTflops peak_tflops;
  friend bool operator==(const LogConfig&, const LogConfig&) = default;
};

// [loss_scale]: fp16's dynamic loss scaling (trainer/loss_scaler.h DynamicLossScaler).
struct LossScaleOptions {
  double initial_scale = 65536.0;  // 2^16
  double min_scale = 1.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 1000;
  int64_t hysteresis = 2;
  friend bool operator==(const LossScaleOptions&, const LossScaleOptions&) = default;
};

struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  TrainConfig train;
  OptimizerConfig optimizer;
  DataConfig data;
  CheckpointConfig checkpoint;
  LogConfig log;
  LossScaleOptions loss_scale;  // fp16 only
  HealthOptions health;         // watchdog, heartbeats, flight recorder (health/health_options.h)
  std::string source;  // file path, for messages
};

// Parses FILE, applies overrides "section.key=value" (value parsed as a TOML value; a bare word that
// is not valid TOML is taken as a string, so --set model.norm=rmsnorm works), checks types and
// unknown keys, and the single-field rules (positive sizes, 0 ≤ dropout < 1, lr ≥ 0, beta in [0,1),
// enum spellings). Throws InputError. DEFAULTS, in the same form, apply only to keys that neither
// the file nor an override sets (`megatrain train --default`: how the resilient driver turns on
// memory snapshots unless the user chose).
Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   const std::vector<std::string>& defaults = {});
// The same rules for TOML text that is not a file (a checkpoint's stored config); SOURCE_NAME names it in
// messages and becomes Config::source.
Config load_config_text(const std::string& toml_text, const std::string& source_name);

// Cross-field rules, checked before any allocation: the model's (validate_model_config);
// seq_len ≤ max_seq_len; world == tp·cp·dp·pp (dp resolved from world when 0); ep > 1 only with
// experts, dividing moe.n_experts and dp; tp against heads, key/value heads, MLP and expert MLP
// widths and sequence-parallel rows; global_batch_size divisible by micro_batch_size·dp;
// min_lr ≤ lr; warmup_steps ≤ decay steps; the pipeline's stages, schedule and its micro-batch
// count (with ZeRO and recompute where a schedule refuses them); cp other than 1 and the [moe]
// options not built yet → "not supported yet". Fills the derived values (dp, global_batch_size,
// decay_steps) in place. Throws InputError. Idempotent.
void resolve_config(Config& cfg, int world_size);

// The config as TOML text, every key, sections and keys in declaration order (printed once at
// start, stored in checkpoints). load_config of this text gives back the same values.
std::string config_to_toml(const Config& cfg);

// The single-field rules alone (load_config calls it after parsing; config_validate.cpp).
void validate_config_fields(const Config& cfg);

// A run config for model `m` alone (an imported model): megatrain's defaults around it, with
// train.seq_len lowered to model.max_seq_len when that is shorter; checked by every rule at world
// size 1. `source` becomes Config::source.
Config config_for_model(const ModelConfig& m, const std::string& source);

}  // namespace megatrain
