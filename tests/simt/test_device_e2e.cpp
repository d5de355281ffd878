// train.device = "cuda" end to end, without a GPU: megatrain_simt is the megatrain binary whose
// Device::cuda ops run the CUDA kernels' own source under the host SIMT emulation
// (megatrain_simt.cpp). With MEGATRAIN_DEVICE_BIN set (ctest device_e2e_cuda.DeviceE2E.<case>,
// label cuda, through tests/cuda/with_gpus.sh) the same tests run that binary — the megatrain
// binary — on GPUs, one per rank, skipping the cases that need more ranks than there are GPUs.
// Each layout trains on device memory — stages, ZeRO buffers, optimizer moments, pipeline
// messages, context-parallel attention — and is held to the CPU binary's single process: loss, gradient norm and validation
// loss of every step within 1e-5 relative (the kernels sum in other orders than the CPU ops;
// dropout is on, so the masks are the CPU's too); mixed precision is held to the CPU binary with
// the same layout within 1e-3 (kMixedRel). A device checkpoint resumes bitwise, and settings the
// device path does not run yet are refused naming the fix. One GPU runs one-rank versions of the
// two-rank mixed-precision and cuDNN checks, and GPT-2 124M's shape against the CPU binary. The
// fortune files come from $MEGATRAIN_FORTUNES where it is set (tests/e2e/e2e_fixture.h).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "health/exit_codes.h"
#include "tests/e2e/e2e_fixture.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

// Small enough for the emulation (every GPU thread a fiber): 4 steps of 2 micro-batches of 2
// sequences of 32 tokens, a validation after steps 2 and 4.
constexpr const char* kShort =
    "--set train.steps=4 --set train.seq_len=32 --set train.micro_batch_size=2 --set train.global_batch_size=4 "
    "--set train.eval_interval=2 --set train.eval_steps=1 --set optimizer.warmup_steps=1 --set parallel.bucket_size_mb=0.05";
// The flash kernels for attention, as the CPU computes it (cuDNN's reads bf16 copies; on a GPU
// MixedPrecisionTrainsLikeTheCpu holds it to them, tests/cuda/test_cudnn_attention.cpp per op).
constexpr const char* kOnDevice = "--set train.device='\"cuda\"' --set train.attention_backend='\"flash\"'";
constexpr double kRel = 1e-5;
// With 16-bit GEMM operands and parameters: the device's activations differ from the CPU's in the
// last float32 bits (other summation orders), and where such a value sits next to a bf16/fp16
// rounding boundary it rounds to the neighbouring 16-bit value, one step of 2^-8 (bf16) or 2^-11
// (fp16) relative. The few such flips leave the loss within ~1e-5 and the gradient norm within
// ~2e-4 of the CPU's (measured over 6 steps); the bound leaves room above that.
constexpr double kMixedRel = 1e-3;

// The binary of the device runs, and whether it runs on GPUs (MEGATRAIN_DEVICE_BIN) rather than
// the emulation.
bool on_gpus() {
  const char* bin = std::getenv("MEGATRAIN_DEVICE_BIN");
  return bin != nullptr && *bin != 0;
}
std::string device_bin() { return on_gpus() ? std::getenv("MEGATRAIN_DEVICE_BIN") : MEGATRAIN_SIMT_BIN; }
// Why a case of `ranks` device ranks cannot run here ("" when it can): on GPUs, one per rank.
std::string too_few_gpus(int ranks) {
  if (!on_gpus()) return "";
  const char* n = std::getenv("MEGATRAIN_TEST_GPUS");
  const int gpus = n != nullptr ? std::atoi(n) : 0;
  return gpus >= ranks ? "" : fmt::format("needs {} GPUs (one per rank), this machine has {}", ranks, gpus);
}

class DeviceE2E : public test::TrainE2E {
 protected:
  // `np` ranks of `bin` with `extra` flags after `steps` (kShort's run, or another), each rank with
  // `threads` OpenMP threads; the metrics' JSON lines (the log in log_).
  std::vector<json> run(const std::string& bin, int np, const std::string& extra, const std::string& name,
                        const std::string& steps = kShort, int threads = 1) {
    const fs::path metrics = dir_ / (name + ".jsonl");
    const std::string cmd =
        fmt::format("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np {} "
                    "-x OMP_NUM_THREADS={} {} train --config {} --set log.metrics_file={} {} {}",
                    np, threads, bin, config_.string(), metrics.string(), steps, extra);
    const auto r = test::run_shell(cmd, 600);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.output;
    log_ = r.output;
    return test::metrics_lines(metrics);
  }
  std::vector<json> on_cpu(const std::string& extra, const std::string& name) {
    return run(test::megatrain_bin(), 1, extra, name);
  }
  std::vector<json> on_device(int np, const std::string& extra, const std::string& name) {
    return run(device_bin(), np, std::string(kOnDevice) + " " + extra, name);
  }
  std::string log_;
};

// The bytes of the model state a step row counts (parameters, gradients, moments) and the device
// memory peak it reports.
std::pair<int64_t, int64_t> state_and_device_bytes(const json& row) {
  const json& m = row.at("memory_bytes");
  return {m.at("params").get<int64_t>() + m.at("grads").get<int64_t>() + m.at("optimizer").get<int64_t>(),
          m.at("device_peak").get<int64_t>()};
}

// 4 steps and 2 validations: 4·2 + 2 values compared.
constexpr int kCompared = 4 * 2 + 2;

// The device run really ran there: its state and activations were handed out by the device
// backend (the CPU run reports none), and the log says how its buffers move.
TEST_F(DeviceE2E, OneRankTrainsLikeTheCpu) {
  const auto cpu = on_cpu("", "cpu");
  ASSERT_EQ(cpu.size(), 6u);
  EXPECT_EQ(state_and_device_bytes(cpu[0]).second, 0);
  const auto device = on_device(1, "", "device");
  EXPECT_EQ(test::compare_runs(cpu, device, kRel, "device vs cpu"), kCompared);
  const auto [state, on_device] = state_and_device_bytes(device.at(0));
  EXPECT_GT(on_device, state + device[0]["memory_bytes"]["activations"].get<int64_t>());
  EXPECT_CONTAINS(log_, "attention: the flash-attention kernels, float32");  // float32: never cuDNN's
  EXPECT_CONTAINS(log_, on_gpus() ? "the communicators move device buffers through NCCL"
                                  : "the communicators move device buffers through MPI (this backend's memory is host "
                                    "memory)");
}

// Llama-style (RMSNorm, RoPE, SwiGLU, grouped key/value heads, untied head) with full recompute.
TEST_F(DeviceE2E, LlamaWithRecomputeTrainsLikeTheCpu) {
  const std::string llama =
      "--set model.norm='\"rmsnorm\"' --set model.position='\"rope\"' --set model.activation='\"swiglu\"' "
      "--set model.bias=false --set model.tie_embeddings=false --set model.n_kv_heads=2 "
      "--set train.recompute='\"full\"'";
  EXPECT_EQ(test::compare_runs(on_cpu(llama, "cpu"), on_device(1, llama, "device"), kRel, "llama"), kCompared);
}

// Two ranks exchanging device buffers: data parallel with ZeRO 3 (parameters gathered per unit,
// gradients reduce-scattered per bucket), tensor parallel with sequence parallelism, a two-stage
// pipeline (activations and their gradients sent between stages, the tied embedding's gradient
// summed over both).
TEST_F(DeviceE2E, TwoRankLayoutsMatchOneCpuProcess) {
  if (const std::string why = too_few_gpus(2); !why.empty()) GTEST_SKIP() << why;
  const auto cpu = on_cpu("", "cpu");
  for (const auto& [name, set] :
       {std::pair{"dp2_zero3", "--set parallel.zero_stage=3"},
        std::pair{"tp2_sp", "--set parallel.tp=2 --set parallel.sequence_parallel=true"},
        std::pair{"pp2", "--set parallel.pp=2"}}) {
    EXPECT_EQ(test::compare_runs(cpu, on_device(2, set, name), kRel, name), kCompared);
  }
}

// Context parallelism on the device (model/ring_attention.h, model/ulysses_attention.h): each sequence split over 2 ranks,
// the ring (key/value blocks and their gradients sent round with send_recv, the block attention
// kernels with and without the causal mask, the LSE merge) and all-to-all, a Llama-style model
// with grouped key/value heads, against one CPU process. Dropout off: a cp rank keys its own masks.
TEST_F(DeviceE2E, ContextParallelTrainsLikeTheCpu) {
  if (const std::string why = too_few_gpus(2); !why.empty()) GTEST_SKIP() << why;
  const std::string llama =
      "--set model.dropout=0 --set model.norm='\"rmsnorm\"' --set model.position='\"rope\"' "
      "--set model.activation='\"swiglu\"' --set model.bias=false --set model.tie_embeddings=false "
      "--set model.n_kv_heads=2";
  const auto cpu = on_cpu(llama, "cpu");
  for (const char* comm : {"ring", "all_to_all"}) {
    const std::string set = fmt::format("{} --set parallel.cp=2 --set parallel.cp_comm='\"{}\"'", llama, comm);
    const auto device = on_device(2, set, std::string("cp2_") + comm);
    EXPECT_EQ(test::compare_runs(cpu, device, kRel, comm), kCompared);
    ASSERT_FALSE(device.empty());
    EXPECT_GT(device[0].value("cp_comm_ms", 0.0), 0.0) << comm;
  }
}

// Mixture of Experts on the device (model/moe.cpp [Note: host routing]): the router on the host
// with the logits down and the plan up, the tokens permuted, exchanged, run through the experts
// and combined on the device. One rank, then ep = 2 over two ranks (expert ZeRO 1, capacity with
// drop by position, the aux-free router bias updated on the device), each against one CPU process.
TEST_F(DeviceE2E, MoeTrainsLikeTheCpu) {
  const std::string moe =
      "--set moe.n_experts=4 --set moe.top_k=2 --set moe.d_ff_expert=64 --set moe.aux_loss_coef=0.01 "
      "--set moe.z_loss_coef=0.001 ";
  EXPECT_EQ(test::compare_runs(on_cpu(moe, "moe_cpu"), on_device(1, moe, "moe_device"), kRel, "moe"), kCompared);
  if (const std::string why = too_few_gpus(2); !why.empty()) GTEST_SKIP() << why;
  const std::string ep2 = moe + "--set moe.capacity_factor=1.25 --set moe.drop_policy='\"position\"' "
                                "--set moe.aux_free_bias=0.01 --set moe.router='\"sigmoid\"' ";
  EXPECT_EQ(test::compare_runs(on_cpu(ep2, "ep2_cpu"),
                               on_device(2, ep2 + "--set parallel.ep=2 --set parallel.zero_stage=1", "ep2_device"),
                               kRel, "moe ep 2"),
            kCompared);
}

// Mixed precision on the device (optim/zero_plan.h [Note: ZeRO on a device]): the 16-bit parameter
// copy rounded from the float32 masters, gathered as 16-bit values and widened per unit, and the
// bf16 gradient reduction (rounded, reduced, widened) are ops on the device stream; fp16 adds the
// dynamic loss scale. Each is held to the CPU binary with the same layout: bf16 rounding makes two
// ranks differ from one process, and the CPU runs the same roundings on the same values.
TEST_F(DeviceE2E, MixedPrecisionTrainsLikeTheCpu) {
  if (const std::string why = too_few_gpus(2); !why.empty()) GTEST_SKIP() << why;
  for (const auto& [name, set] :
       {std::pair{"bf16_zero3_bf16_reduce",
                  "--set train.precision='\"bf16\"' --set parallel.zero_stage=3 --set parallel.grad_reduce_dtype='\"bf16\"'"},
        std::pair{"bf16_zero0_bf16_reduce", "--set train.precision='\"bf16\"' --set parallel.grad_reduce_dtype='\"bf16\"'"},
        std::pair{"fp16_zero1", "--set train.precision='\"fp16\"' --set parallel.zero_stage=1"}}) {
    // Like with like: the device keeps float32 activations, so the CPU reference does too.
    const auto cpu = run(test::megatrain_bin(), 2, std::string(set) + " --set train.bf16_activations=false",
                         std::string(name) + "_cpu");
    EXPECT_EQ(test::compare_runs(cpu, on_device(2, set, name), kMixedRel, name), kCompared);
  }
  EXPECT_CONTAINS(log_, "dynamic loss scale");
  if (!on_gpus()) return;
  // cuDNN's attention (train.attention_backend = "auto" on bf16) against the flash kernels: its
  // bf16 copies of q, k, v and the output move the loss and norm by well under 2 %.
  const std::string bf16 = "--set train.precision='\"bf16\"' ";
  const auto flash = on_device(2, bf16, "bf16_flash");
  const auto cudnn = on_device(2, bf16 + "--set train.attention_backend='\"auto\"'", "bf16_cudnn");
  EXPECT_EQ(test::compare_runs(flash, cudnn, 2e-2, "cudnn vs flash"), kCompared);
  EXPECT_CONTAINS(log_, "attention: cuDNN's fused attention on bf16 copies");
}

// The one-GPU version of MixedPrecisionTrainsLikeTheCpu: bf16 on the device (the 16-bit parameter
// copy and GEMM operands rounded there, the flash kernels) against bf16 in the CPU binary.
TEST_F(DeviceE2E, OneRankBf16TrainsLikeTheCpu) {
  const std::string bf16 = "--set train.precision='\"bf16\"'";
  EXPECT_EQ(test::compare_runs(on_cpu(bf16 + " --set train.bf16_activations=false", "bf16_cpu"),
                               on_device(1, bf16, "bf16_device"), kMixedRel, "bf16"),
            kCompared);
  EXPECT_CONTAINS(log_, "precision bf16: compute reads a bf16 copy of the float32 master weights");
}

// The one-GPU version of MixedPrecisionTrainsLikeTheCpu's cuDNN check: cuDNN's attention
// (train.attention_backend = "auto" on bf16) against the flash kernels; its bf16 copies of q, k, v
// and the output move the loss and norm by well under 2 %.
TEST_F(DeviceE2E, OneRankCudnnMatchesFlash) {
  if (!on_gpus())
    GTEST_SKIP() << "cuDNN's attention runs on a GPU only; the emulation has the flash kernels "
                    "(OneRankAutoAttentionRunsCudnnOrWarns checks what a run there says)";
  const std::string bf16 = "--set train.precision='\"bf16\"' ";
  const auto flash = on_device(1, bf16, "bf16_flash");
  const auto cudnn = on_device(1, bf16 + "--set train.attention_backend='\"auto\"'", "bf16_cudnn");
  EXPECT_EQ(test::compare_runs(flash, cudnn, 2e-2, "cudnn vs flash"), kCompared);
  EXPECT_CONTAINS(log_, "attention: cuDNN's fused attention on bf16 copies");
}

// train.attention_backend = "auto" on bf16 asks for cuDNN's attention: the run gets it, or its
// start-up log says which kernels run instead and warns why — cuDNN's version and reason on a GPU,
// or (the emulation) that the build has none.
TEST_F(DeviceE2E, OneRankAutoAttentionRunsCudnnOrWarns) {
  on_device(1, "--set train.precision='\"bf16\"' --set train.attention_backend='\"auto\"' --set train.steps=1",
            "auto");
  if (on_gpus() && log_.find("attention: cuDNN's fused attention on bf16 copies") != std::string::npos) return;
  EXPECT_CONTAINS(log_, "WARNING: attention: train.attention_backend = \"auto\" with precision bf16 asks for "
                        "cuDNN's fused attention, but ");
  EXPECT_CONTAINS(log_, "attention runs on the float32 flash kernels");
  if (on_gpus()) {
    EXPECT_CONTAINS(log_, "attention: the flash-attention kernels, float32 (cuDNN ");
  } else {
    EXPECT_CONTAINS(log_, "attention: the flash-attention kernels, float32 (this build has no cuDNN attention)");
    EXPECT_CONTAINS(log_, "but this build has no cuDNN attention");
  }
}

// configs/gpt2_124m.toml's shape — 12 layers of width 768, 12 heads of 64, its vocabulary of 50257
// padded to 50304, 1024 tokens — for 3 steps of one sequence in float32 on one GPU against the CPU
// binary on every core. Both are float32 and differ only in the order of their sums; the tiny
// model's 1e-5 (kRel) covers sums of at most a few hundred terms, and this shape's go to 1024
// (attention over keys, weight gradients over tokens), 3072 (the MLP's down projection) and
// 50304 (the softmax's normaliser). Rounding differences grow about as the square root of a sum's
// length, about 14× from 256 to 50304, so the bound is 1e-4; a wrong index or a lost term moves
// the loss (ln 50304 ≈ 10.8 at the start) by far more.
TEST_F(DeviceE2E, ProductionShapeTrainsLikeTheCpu) {
  if (!on_gpus())
    GTEST_SKIP() << "GPT-2 124M at 1024 tokens is too slow for the emulation (every GPU thread a fiber); it runs on "
                    "a GPU";
  const std::string gpt2 =
      "--set model.n_layers=12 --set model.d_model=768 --set model.n_heads=12 --set model.vocab_size=50257 "
      "--set model.max_seq_len=1024 --set model.dropout=0.0 --set train.seq_len=1024 --set train.micro_batch_size=1 "
      "--set train.global_batch_size=1 --set train.steps=3 --set train.eval_interval=0 --set optimizer.warmup_steps=1";
  constexpr double kProductionRel = 1e-4;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto cpu = run(test::megatrain_bin(), 1, gpt2, "gpt2_cpu", "", cores);
  const auto device = run(device_bin(), 1, std::string(kOnDevice) + " " + gpt2, "gpt2_device", "");
  EXPECT_EQ(test::compare_runs(cpu, device, kProductionRel, "gpt2 124m shape"), 3 * 2);
}

// Saved on the device at dp 2, ZeRO 1 (each rank's optimizer shard copied down) after step 2;
// resumed there (copied up), steps 3–4 and the validation at 4 equal the uninterrupted run's. The
// model has a dense block and an MoE block at ep 2, so the state comes down and goes up in both of
// its pieces, the dense and the experts'.
TEST_F(DeviceE2E, ACheckpointResumesBitwise) {
  if (const std::string why = too_few_gpus(2); !why.empty()) GTEST_SKIP() << why;
  const fs::path ckpt = dir_ / "ckpt";
  const std::string layout =
      "--set parallel.zero_stage=1 --set moe.n_experts=4 --set moe.top_k=2 --set moe.d_ff_expert=64 "
      "--set moe.layers=2 --set parallel.ep=2 ";
  const auto full = on_device(
      2, layout + "--set checkpoint.save_interval=2 --set checkpoint.dir=" + ckpt.string(), "full");
  ASSERT_TRUE(fs::exists(ckpt / "step_0000002" / "model.h5"));
  std::vector<json> tail;
  for (const json& j : full)
    if (j["step"].get<int64_t>() > 2) tail.push_back(j);
  const auto resumed =
      on_device(2, layout + "--set checkpoint.load=" + (ckpt / "step_0000002").string(), "resumed");
  EXPECT_EQ(test::compare_runs(tail, resumed, 0.0, "resumed"), 2 * 2 + 1);
}

// The replica check on the device reads a host copy of the parameters alone; the bit flipped
// after step 1 in rank 1's host copy (then sent up: the moments stay where they are) is found by
// the check at step 2, which names the tensor (and both ranks: two replicas hold no majority).
TEST_F(DeviceE2E, ABitFlippedInOneReplicaIsFound) {
  if (const std::string why = too_few_gpus(2); !why.empty()) GTEST_SKIP() << why;
  const std::string cmd = fmt::format(
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "
      "-x MEGATRAIN_FAULT=bitflip:rank=1:step=1:tensor=layers.0.attn.qkv.weight {} train --config {} {} {} "
      "--set health.replica_check_interval=2",
      device_bin(), config_.string(), kShort, kOnDevice);
  const auto r = test::run_shell(cmd, 600);
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "REPLICA_MISMATCH step=2 ranks=[0,1] params=[layers.0.attn.qkv.weight]");
}

TEST_F(DeviceE2E, SettingsNotOnTheDeviceYetAreRefusedNamingTheFix) {
  const std::string base = "train --config " + config_.string() + " " + kOnDevice + " ";
  auto r = test::run_shell(device_bin() + " " + base + "--set parallel.grad_compression='\"onebit\"'");
  EXPECT_EQ(r.code, kExitUsage) << r.output;
  EXPECT_CONTAINS(r.output, "train.device = \"cuda\" reduces gradients exactly so far");
  if (on_gpus()) return;
  // cuDNN's attention is not in the emulation.
  r = test::run_shell(device_bin() + " " + base +
                      "--set train.attention_backend='\"cudnn\"' --set train.precision='\"bf16\"'");
  EXPECT_EQ(r.code, kExitUsage) << r.output;
  EXPECT_CONTAINS(r.output,
                  "train.attention_backend = \"cudnn\": cuDNN's fused attention is not in this device backend");
  // The production binary on a machine without a GPU (or without a CUDA backend in the build): a
  // usage error naming the key, before any rank waits for another.
  r = test::run_megatrain(base);
  EXPECT_EQ(r.code, kExitUsage) << r.output;
  EXPECT_CONTAINS(r.output, "train.device = \"cuda\", but ");
  EXPECT_CONTAINS(r.output, "set train.device = \"cpu\" to train on the CPU");
}

}  // namespace
}  // namespace megatrain
