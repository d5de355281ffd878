// `megatrain import --hf DIR --out CKPT [--config-out FILE]`: a Hugging Face model folder (config.json
// + model.safetensors, F32/BF16/F16) as a step-0 checkpoint folder CKPT (zero Adam state) that
// `checkpoint.load = "CKPT"` reads (with its manifest.json, so `megatrain checkpoint verify` checks it),
// and optionally a config to continue training from it. Collective: every rank reads the model and
// writes its partition of it.
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "kernels/check.h"
#include "parallel/comm.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/checkpoint_verify.h"
#include "checkpoint/file_io.h"
#include "cli/commands.h"
#include "config/config.h"
#include "interop/hf_interop.h"

namespace megatrain {
namespace {
namespace fs = std::filesystem;

void write_text(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
    MT_INPUT_CHECK(out.good(), "{}: cannot be written; check --config-out", tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  MT_INPUT_CHECK(!ec, "{}: cannot be written ({}); check --config-out", path.string(), ec.message());
}

}  // namespace

Command add_import_command(CLI::App& root) {
  struct Options {
    std::string hf, out, config_out;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand(
      "import", "Turn a Hugging Face model folder (GPT-2, Llama or Mixtral) into a step-0 megatrain checkpoint");
  app->add_option("--hf", opts->hf, "Folder holding config.json and model.safetensors")->required();
  app->add_option("--out", opts->out, "Checkpoint folder to create (load it with checkpoint.load)")->required();
  app->add_option("--config-out", opts->config_out, "Also write a TOML config that continues training from it");
  return {app, [opts] {
            const Comm world = Comm::world();
            const fs::path out = fs::absolute(opts->out), tmp = out.string() + ".tmp";
            MT_INPUT_CHECK(!fs::exists(out), "{}: already exists; remove it or choose another --out", out.string());
            const HfImport model = hf_import(opts->hf);
            const std::string source = (fs::path(opts->hf) / "config.json").string();
            Config cfg = config_for_model(model.model, source);
            Config resolved = cfg;
            resolve_config(resolved, world.size());
            const ParamLayout& layout = model.layout;
            const FlatBuffer exp_avg(layout.total()), exp_avg_sq(layout.total());
            CheckpointMeta meta;
            meta.state = TrainState{0, 0, resolved.train.seed};
            meta.config_toml = config_to_toml(resolved);
            const auto& p = resolved.parallel;
            meta.layout_json = fmt::format(R"({{"tp":{},"pp":{},"cp":{},"ep":{},"dp":{},"world":{}}})", p.tp, p.pp,
                                           p.cp, p.ep, p.dp, world.size());
            if (world.rank() == 0) {
              fs::remove_all(tmp);
              std::error_code ec;
              fs::create_directories(tmp, ec);
              MT_INPUT_CHECK(!ec, "{}: cannot be created ({}); check --out", tmp.string(), ec.message());
            }
            world.barrier();
            const fs::path file = tmp / kModelFile;
            const CheckpointWritten written =
                checkpoint_file_write(file.string(),
                                      checkpoint_tensors_full(layout, model.params.data(), exp_avg.data(),
                                                              exp_avg_sq.data(), world.rank(), world.size()),
                                      meta, world);
            const auto bytes = static_cast<int64_t>(fs::file_size(file));
            const uint32_t crc = file_crc32_shared(file, bytes, world.handle());
            if (world.rank() != 0) return 0;
            write_file_durably(tmp / kManifestFile,
                               manifest_to_json(manifest_for(meta, written.tensors, bytes, crc, std::nullopt)));
            std::error_code ec;
            fs::rename(tmp, out, ec);
            MT_INPUT_CHECK(!ec, "{}: cannot be renamed to {} ({})", tmp.string(), out.string(), ec.message());
            spdlog::info("imported {} ({} parameters) as checkpoint {}", opts->hf, layout.num_parameters(),
                         out.string());
            if (!opts->config_out.empty()) {
              cfg.checkpoint.load = out.string();
              write_text(opts->config_out, config_to_toml(cfg));
              spdlog::info("continue training with: megatrain train --config {} --set data.train=PREFIX",
                           opts->config_out);
            }
            return 0;
          },
          /*uses_mpi=*/true};
}

}  // namespace megatrain
