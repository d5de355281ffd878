// `megatrain export` / `megatrain import` end to end: a checkpoint trained for 2 steps (GPT-2-like,
// Llama-like with GQA and an untied head, and Mixtral-like: that Llama with every block MoE, trained
// with a capacity factor) → Hugging Face folder → checkpoint gives back every parameter bit for
// bit, with zero Adam state at step 0; training continues from the imported
// checkpoint with the written config; bad input exits with its code (65 data, 66 checkpoint, 64 flag) naming the file.
#include <cstring>
#include <fstream>
#include <sstream>

#include "model/params.h"
#include "tests/e2e/e2e_fixture.h"
#include "checkpoint/checkpoint_file.h"
#include "config/config.h"

namespace megatrain {
namespace {
using test::run_megatrain;
namespace fs = std::filesystem;

constexpr const char* kLlama =
    "--set model.norm=rmsnorm --set model.position=rope --set model.activation=swiglu --set model.n_kv_heads=2 "
    "--set model.bias=false --set model.tie_embeddings=false --set model.dropout=0.0";
// Every block MoE, softmax top 2: what MixtralForCausalLM computes. The capacity factor is a
// training setting Mixtral (dropless) has no word for: it does not stop the export.
constexpr const char* kMixtral =
    " --set moe.n_experts=4 --set moe.top_k=2 --set moe.d_ff_expert=64 --set moe.aux_loss_coef=0.01 "
    "--set moe.capacity_factor=1.25";

struct Saved {
  CheckpointMeta meta;
  Config cfg;
  ParamLayout layout;
  std::vector<float> params, exp_avg, exp_avg_sq;
};

// Everything a checkpoint folder holds, read with the layout of the config it stores.
Saved read_checkpoint(const fs::path& folder) {
  Saved s;
  const std::string file = (folder / "model.h5").string();
  s.meta = checkpoint_file_read_meta(file);
  s.cfg = load_config_text(s.meta.config_toml, file);
  s.layout = gpt_param_layout(s.cfg.model);
  const auto n = static_cast<size_t>(s.layout.total());
  s.params.resize(n), s.exp_avg.resize(n), s.exp_avg_sq.resize(n);
  checkpoint_file_read(file,
                       checkpoint_tensors_full(s.layout, s.params.data(), s.exp_avg.data(), s.exp_avg_sq.data(), 0, 1));
  return s;
}

std::string model_section(const Config& c) {
  std::istringstream in(config_to_toml(c));
  std::string out;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("[")) inside = line == "[model]";
    else if (inside) out += line + "\n";
  }
  return out;
}

class HfInteropE2E : public test::TrainE2E {
 protected:
  // Trains 2 steps with a save at step 2 into dir_/NAME; returns the checkpoint dir.
  fs::path train_checkpoint(const std::string& name, const std::string& extra) {
    const fs::path d = dir_ / name;
    auto r = run_megatrain("train --config " + config_.string() +
                           " --set train.steps=2 --set train.eval_interval=0 --set optimizer.decay_steps=60 "
                           "--set checkpoint.save_interval=2 "
                           "--set checkpoint.dir='\"" + d.string() + "\"' " + extra);
    EXPECT_EQ(r.code, 0) << r.output;
    return d;
  }

  void round_trip(const std::string& name, const std::string& extra, const std::string& export_from) {
    const fs::path ckpt = train_checkpoint(name, extra);
    const fs::path hf = dir_ / (name + "_hf"), imported = dir_ / (name + "_imported");
    const fs::path toml = dir_ / (name + "_imported.toml");
    auto r = run_megatrain("export --checkpoint " + (export_from.empty() ? ckpt : ckpt / export_from).string() +
                           " --out " + hf.string());
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(fs::exists(hf / "config.json"));
    r = run_megatrain("import --hf " + hf.string() + " --out " + imported.string() + " --config-out " + toml.string());
    ASSERT_EQ(r.code, 0) << r.output;

    const Saved a = read_checkpoint(ckpt / "step_0000002"), b = read_checkpoint(imported);
    EXPECT_EQ(a.meta.state.step, 2);
    EXPECT_EQ(b.meta.state.step, 0);
    EXPECT_EQ(b.meta.state.consumed_samples, 0);
    ASSERT_EQ(a.layout.size(), b.layout.size());
    for (size_t i = 0; i < a.layout.size(); ++i) {
      const ParamSpec& spec = a.layout.spec(i);
      ASSERT_EQ(spec.name, b.layout.spec(i).name);
      ASSERT_TRUE(spec.shape == b.layout.spec(i).shape) << spec.name;
      const int64_t n = spec.shape.numel(), rows = spec.valid_rows < 0 ? spec.shape[0] : spec.valid_rows;
      const int64_t valid = n / spec.shape[0] * rows;
      const float* pa = a.params.data() + a.layout.offset(i);
      const float* pb = b.params.data() + b.layout.offset(i);
      EXPECT_EQ(0, std::memcmp(pa, pb, static_cast<size_t>(valid) * 4)) << name << ": " << spec.name << " differs";
      for (int64_t e = valid; e < n; ++e) ASSERT_EQ(pb[e], 0.0f) << spec.name << ": padded rows must be zero";
    }
    for (size_t e = 0; e < b.exp_avg.size(); ++e) ASSERT_TRUE(b.exp_avg[e] == 0 && b.exp_avg_sq[e] == 0);

    // The written config loads the imported checkpoint and trains on.
    const Config written = load_config(toml.string(), {});
    EXPECT_EQ(written.checkpoint.load, fs::absolute(imported).string());
    EXPECT_EQ(model_section(written), model_section(b.cfg));
    r = run_megatrain("train --config " + toml.string() + " --set data.train='\"" + (dir_ / "train").string() +
                      "\"' --set train.steps=1 --set train.micro_batch_size=8 --set log.interval=1");
    EXPECT_EQ(r.code, 0) << r.output;  // a checkpoint.load that fails exits with 64 or 66
  }
};

TEST_F(HfInteropE2E, Gpt2ExportImportRoundTripIsBitExact) {
  round_trip("gpt2", "", "");  // --checkpoint DIR: the folder `latest` names
  // A GPT-2 model's [model] comes back whole, so the original config loads the imported checkpoint too.
  const Saved a = read_checkpoint(dir_ / "gpt2" / "step_0000002"), b = read_checkpoint(dir_ / "gpt2_imported");
  EXPECT_EQ(model_section(a.cfg), model_section(b.cfg));
}

TEST_F(HfInteropE2E, LlamaExportImportRoundTripIsBitExact) {
  round_trip("llama", kLlama, "step_0000002");  // --checkpoint DIR/step_N
  std::ifstream in(dir_ / "llama_hf" / "config.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["architectures"], nlohmann::json({"LlamaForCausalLM"}));
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["tie_word_embeddings"], false);
}

TEST_F(HfInteropE2E, MixtralExportImportRoundTripIsBitExact) {
  round_trip("mixtral", std::string(kLlama) + kMixtral, "step_0000002");
  std::ifstream in(dir_ / "mixtral_hf" / "config.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["architectures"], nlohmann::json({"MixtralForCausalLM"}));
  EXPECT_EQ(j["num_local_experts"], 4);
  EXPECT_EQ(j["intermediate_size"], 64);
  const Saved b = read_checkpoint(dir_ / "mixtral_imported");
  EXPECT_EQ(b.cfg.model.moe.capacity_factor, 0.0f);  // comes back as what the export computes
}

TEST_F(HfInteropE2E, BadInputExitsWithItsCodeNamingTheFile) {
  // rmsnorm with learned positions has no Hugging Face equivalent.
  const fs::path mixed = train_checkpoint("mixed", "--set model.norm=rmsnorm");
  auto r = run_megatrain("export --checkpoint " + mixed.string() + " --out " + (dir_ / "mixed_hf").string());
  EXPECT_EQ(r.code, 65) << r.output;
  EXPECT_NE(r.output.find((mixed / "step_0000002" / "model.h5").string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.position = \"rope\""), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "mixed_hf"));

  // A sigmoid router has no Mixtral equivalent.
  const fs::path sigmoid =
      train_checkpoint("sigmoid", std::string(kLlama) + kMixtral + " --set moe.router='\"sigmoid\"'");
  r = run_megatrain("export --checkpoint " + sigmoid.string() + " --out " + (dir_ / "sigmoid_hf").string());
  EXPECT_EQ(r.code, 65) << r.output;
  EXPECT_NE(r.output.find("moe.router = \"softmax\""), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "sigmoid_hf"));

  r = run_megatrain("export --checkpoint " + (dir_ / "nowhere").string() + " --out " + (dir_ / "x").string());
  EXPECT_EQ(r.code, 66) << r.output;
  EXPECT_NE(r.output.find("nowhere"), std::string::npos) << r.output;

  fs::create_directories(dir_ / "bert");
  test::write_file(dir_ / "bert" / "config.json", R"({"model_type": "bert", "hidden_size": 64})");
  r = run_megatrain("import --hf " + (dir_ / "bert").string() + " --out " + (dir_ / "bert_ckpt").string());
  EXPECT_EQ(r.code, 65) << r.output;
  EXPECT_NE(r.output.find((dir_ / "bert" / "config.json").string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model_type \"bert\" is not supported"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "bert_ckpt"));

  r = run_megatrain("import --hf " + (dir_ / "bert").string() + " --out " + (dir_ / "bert").string());
  EXPECT_EQ(r.code, 64) << r.output;
  EXPECT_NE(r.output.find("already exists"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace megatrain
