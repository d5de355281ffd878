// `megatrain export --checkpoint DIR --out OUTDIR [--dtype fp32|bf16|fp16]`: a checkpoint as a
// Hugging Face model folder (config.json + model.safetensors in that dtype, float32 by default:
// checkpoints hold float32 masters) that transformers loads with from_pretrained. The model
// config comes from the checkpoint's stored config; rank 0 does the work, other ranks wait for nothing.
// An MoE model exports as MixtralForCausalLM, which routes dropless whatever capacity it trained with.
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "kernels/check.h"
#include "parallel/comm.h"
#include "trainer/checkpoint.h"
#include "checkpoint/checkpoint_file.h"
#include "cli/commands.h"
#include "config/config.h"
#include "interop/hf_interop.h"

namespace megatrain {

Command add_export_command(CLI::App& root) {
  struct Options {
    std::string checkpoint, out;
    std::string dtype = "fp32";
  };
  auto opts = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand(
      "export", "Write a checkpoint as a Hugging Face model folder (config.json + model.safetensors)");
  app->add_option("--checkpoint", opts->checkpoint, "Checkpoint folder (DIR/step_N) or checkpoint dir with 'latest'")
      ->required();
  app->add_option("--out", opts->out, "Output folder")->required();
  app->add_option("--dtype", opts->dtype, "Weights' dtype in model.safetensors: fp32, bf16 or fp16 (rounded to nearest)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  return {app, [opts] {
            if (Comm::world().rank() != 0) return 0;
            const std::string file = checkpoint_model_file(opts->checkpoint);
            const CheckpointMeta meta = checkpoint_file_read_meta(file);
            const Config cfg = load_config_text(meta.config_toml, file + " (its stored config)");
            const HfFamily family = hf_family(cfg.model, file);  // before reading any tensor
            const ParamLayout layout = gpt_param_layout(cfg.model);
            FlatBuffer params(layout.total()), exp_avg(layout.total()), exp_avg_sq(layout.total());
            checkpoint_file_read(file, checkpoint_tensors_full(layout, params.data(), exp_avg.data(), exp_avg_sq.data(), 0, 1));
            const Precision dtype = opts->dtype == "fp32"   ? Precision::fp32
                                    : opts->dtype == "bf16" ? Precision::bf16
                                                            : Precision::fp16;
            hf_export(opts->out, cfg.model, params.data(), file, dtype);
            spdlog::info("exported {} (step {}, {} parameters) as a Hugging Face {} model in {} to {}", file,
                         meta.state.step, layout.num_parameters(), hf_architecture(family), opts->dtype, opts->out);
            // Capacity is a training setting, not a weight: say which routing the export computes.
            if (cfg.model.moe.capacity_factor > 0.0f)
              spdlog::info("trained with moe.capacity_factor = {}; {} routes dropless (as capacity_factor = 0)",
                           cfg.model.moe.capacity_factor, hf_architecture(family));
            return 0;
          },
          /*uses_mpi=*/true};
}

}  // namespace megatrain
