#include "trainer/run_summary.h"

#include <spdlog/spdlog.h>

#include "kernels/cuda/backend.h"
#include "kernels/ops.h"

namespace megatrain {

void log_run_summary(const Config& cfg, RankRun& run, const RunState& at) {
  if (run.world().rank() != 0) return;
  spdlog::info("model: {} parameters, {:.1f} MiB activations on rank 0; data: {} tokens, {} samples per epoch",
               run.stored_layout().num_parameters(), static_cast<double>(run.activation_bytes()) / (1 << 20),
               run.data().train_tokens(), run.data().train_samples_per_epoch());
  if (cfg.train.precision != Precision::fp32)
    spdlog::info("precision {0}: compute reads a {0} copy of the float32 master weights; the linear layers' GEMMs: "
                 "{1}; activations: {3}; gradients and optimizer state are float32{2}",
                 precision_name(cfg.train.precision), matmul_path(run.stream()),
                 at.scaler ? fmt::format("; dynamic loss scale from {:g}", at.scaler->scale()) : "",
                 activation_dtype(cfg.train.precision, cfg.train.device, cfg.parallel.cp, cfg.train.bf16_activations)
                     .why);
  if (cfg.train.device != Device::cpu) {
    const LocalDims local = local_dims(cfg.model, run.layout().tp());  // this rank's heads
    const AttentionPath attention = cuda_backend().attention_path(
        run.stream(), cfg.train.micro_batch_size, cfg.train.seq_len, local.heads, local.kv_heads, cfg.model.head_dim());
    spdlog::info("train.device = \"cuda\": one device per rank; GEMMs: {}; attention: {}; the communicators move "
                 "device buffers through {}",
                 matmul_path(run.stream()), attention.path,
                 cuda_backend().host_addressable() ? "MPI (this backend's memory is host memory)" : "NCCL");
    if (!attention.warning.empty()) spdlog::warn("WARNING: attention: {}", attention.warning);
  }
  spdlog::info(
      "{} micro-batches of {} per step per rank, tp = {}{}, pp = {} ({}, {} chunk(s) per rank, {} "
      "micro-batch slots on rank 0), dp = {}, ZeRO stage {}, {} gradient buckets, {} tokens per step",
      run.data().train().max_micro_batches(), cfg.train.micro_batch_size, run.groups().tp().size(),
      cfg.parallel.sequence_parallel ? " (sequence parallel)" : "", run.groups().pp().size(),
      cfg.parallel.pipeline_schedule, cfg.parallel.virtual_stages, run.held_micro_batches(),
      run.groups().dp_cp().size(), cfg.parallel.zero_stage, run.optim_groups().front().zero().buckets().size(),
      run.tokens_per_step());
  const BatchSizes& batches = run.data().train().sizes();
  if (batches.ramp_batches() > 0)
    spdlog::info(
        "batch ramp-up (train.rampup_batch_size): global batches of {} samples over the first {} steps ({} "
        "samples), then {}; the learning-rate schedule counts samples",
        fmt::join(batches.sizes(), ", "), batches.ramp_batches(), batches.first_sample(batches.ramp_batches()),
        batches.global());
}

}  // namespace megatrain
