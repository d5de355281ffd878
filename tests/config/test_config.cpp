// Tests of config/config: parsing, defaults, --set overrides, the rules, and the TOML round trip.
// Every error test checks that the message names the file and the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/expect_contains.h"
#include "kernels/check.h"
#include "config/config.h"
#include "tests/config/config_fixture.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;
using test::ConfigTest;

TEST_F(ConfigTest, EmptyFileGivesDefaults) {
  std::string path = write("");
  Config c = load_config(path, {});
  EXPECT_EQ(c.source, path);
  EXPECT_EQ(c.model.n_layers, ModelConfig{}.n_layers);
  EXPECT_EQ(c.model.norm, NormKind::layernorm);
  EXPECT_EQ(c.parallel, ParallelConfig{});
  EXPECT_EQ(c.train, TrainConfig{});
  EXPECT_EQ(c.optimizer, OptimizerConfig{});
  EXPECT_EQ(c.data, DataConfig{});
  EXPECT_EQ(c.checkpoint, CheckpointConfig{});
  EXPECT_EQ(c.log, LogConfig{});
}

TEST_F(ConfigTest, ParsesEverySection) {
  std::string path = write(R"(
[model]
n_layers = 2
d_model = 64
n_heads = 8
n_kv_heads = 2
norm = "rmsnorm"
position = "rope"
activation = "swiglu"
bias = false
dropout = 0.1
[parallel]
dp = 2
[train]
seq_len = 32
seed = 7
[optimizer]
lr = 1          # floats may be written as integers
decay = "linear"
[data]
train = "data/tiny_train"
shuffle = false
[checkpoint]
dir = "ckpt"
async = true
[log]
peak_tflops = 312
)");
  Config c = load_config(path, {});
  EXPECT_EQ(c.model.n_layers, 2);
  EXPECT_EQ(c.model.n_kv_heads, 2);
  EXPECT_EQ(c.model.norm, NormKind::rmsnorm);
  EXPECT_EQ(c.model.position, PositionKind::rope);
  EXPECT_EQ(c.model.activation, ActivationKind::swiglu);
  EXPECT_FALSE(c.model.bias);
  EXPECT_FLOAT_EQ(c.model.dropout, 0.1f);
  EXPECT_EQ(c.parallel.dp, 2);
  EXPECT_EQ(c.train.seq_len, 32);
  EXPECT_EQ(c.train.seed, 7u);
  EXPECT_EQ(c.optimizer.lr, 1.0f);
  EXPECT_EQ(c.optimizer.decay, DecayKind::linear);
  EXPECT_EQ(c.data.train, (std::vector<WeightedPrefix>{{1.0, "data/tiny_train"}}));
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_EQ(c.checkpoint.dir, "ckpt");
  EXPECT_TRUE(c.checkpoint.async);
  EXPECT_EQ(c.log.peak_tflops, (PeakTflops{false, 312.0}));
}

TEST_F(ConfigTest, PeakTflopsIsAutoByDefaultOrANumber) {
  EXPECT_EQ(load_config(write(""), {}).log.peak_tflops, PeakTflops{});
  EXPECT_TRUE(load_config(write("[log]\npeak_tflops = \"auto\"\n"), {}).log.peak_tflops.automatic);
  EXPECT_EQ(load_config(write("[log]\npeak_tflops = 0\n"), {}).log.peak_tflops, (PeakTflops{false, 0.0}));
  EXPECT_CONTAINS(load_error("[log]\npeak_tflops = \"fast\"\n", "'log.peak_tflops'"), "\"auto\" or a number");
  load_error("[log]\npeak_tflops = -1\n", "log.peak_tflops");
  EXPECT_CONTAINS(config_to_toml(Config{}), "peak_tflops = \"auto\"");
}

TEST_F(ConfigTest, OverridesApplyInOrder) {
  std::string path = write("[model]\nn_layers = 4\n");
  Config c = load_config(path, {"model.n_layers=6", "model.norm=rmsnorm", "optimizer.lr = 0.01", "data.train=\"a b\"",
                                "data.valid=data/v", "data.shuffle=false", "log.metrics_file=", "model.n_layers=8"});
  EXPECT_EQ(c.model.n_layers, 8);
  EXPECT_EQ(c.model.norm, NormKind::rmsnorm);
  EXPECT_FLOAT_EQ(c.optimizer.lr, 0.01f);
  EXPECT_EQ(c.data.train, (std::vector<WeightedPrefix>{{1.0, "a b"}}));
  EXPECT_EQ(c.data.valid, (std::vector<WeightedPrefix>{{1.0, "data/v"}}));
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_EQ(c.log.metrics_file, "");
}

// `train --default`: a key the file and --set leave unset takes it; one either sets keeps theirs,
// and a bad one is named as coming from --default.
TEST_F(ConfigTest, DefaultsApplyOnlyWhereNothingSetTheKey) {
  const std::vector<std::string> memory_on = {"checkpoint.memory_interval=1", "checkpoint.dir=ckpt"};
  Config c = load_config(write("[model]\nn_layers = 4\n"), {}, memory_on);
  EXPECT_EQ(c.checkpoint.memory_interval, 1);
  EXPECT_EQ(c.checkpoint.dir, "ckpt");
  EXPECT_EQ(load_config(write("[checkpoint]\nmemory_interval = 0\n"), {}, memory_on).checkpoint.memory_interval, 0);
  EXPECT_EQ(load_config(write(""), {"checkpoint.memory_interval=3"}, memory_on).checkpoint.memory_interval, 3);
  EXPECT_EQ(load_config(write(""), {"checkpoint.memory_interval=3"}, memory_on).checkpoint.dir, "ckpt");
  const std::string path = write("");
  std::string msg = test::input_error_of([&] { load_config(path, {}, {"checkpoint.memory_interval=-1"}); });
  EXPECT_CONTAINS(msg, "checkpoint.memory_interval");
  msg = test::input_error_of([&] { load_config(path, {}, {"checkpoint.memory_intervl=1"}); });
  EXPECT_CONTAINS(msg, "unknown key 'checkpoint.memory_intervl' (from --default)");
  msg = test::input_error_of([&] { load_config(path, {}, {"checkpoint.memory_interval"}); });
  EXPECT_CONTAINS(msg, "--default 'checkpoint.memory_interval': expected section.key=value");
}

TEST_F(ConfigTest, ResolveFillsDerivedValues) {
  Config c = load_config(write("[train]\nmicro_batch_size = 3\nsteps = 50\n"), {});
  resolve_config(c, 4);
  EXPECT_EQ(c.parallel.dp, 4);
  EXPECT_EQ(c.train.global_batch_size, 12);
  EXPECT_EQ(c.optimizer.decay_steps, 50);
  resolve_config(c, 4);  // idempotent
  EXPECT_EQ(c.parallel.dp, 4);
  EXPECT_EQ(c.train.global_batch_size, 12);
}

TEST_F(ConfigTest, RoundTripThroughToml) {
  std::string path = write(R"(
[model]
n_layers = 3
d_model = 96
n_heads = 6
n_kv_heads = 3
d_ff = 200
vocab_size = 1000
norm = "rmsnorm"
position = "rope"
activation = "swiglu"
tie_embeddings = false
dropout = 0.125
init_std = 0.0123
norm_eps = 1e-6
rope_theta = 500000
[train]
seq_len = 64
global_batch_size = 16
seed = 99
eval_interval = 5
recompute = "full"
recompute_layers = 2
precision = "bf16"
[parallel]
pp = 2
pipeline_layers = [1, 2]
[optimizer]
lr = 6e-4
min_lr = 1e-5
eps = 1e-8
warmup_steps = 10
decay = "constant"
decay_norms_and_biases = true
[data]
train = "tr\"ain\\x"
valid = "va\tlid"
[checkpoint]
dir = "c"
save_interval = 20
keep_last = 2
load = "c/step_20"
[log]
interval = 1
metrics_file = "m.jsonl"
peak_tflops = 989.5
)");
  Config a = load_config(path, {});
  resolve_config(a, 2);
  std::string text = config_to_toml(a);
  Config b = load_config(write(text, "y.toml"), {});
  resolve_config(b, 2);
  EXPECT_EQ(a.parallel, b.parallel);
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.optimizer, b.optimizer);
  EXPECT_EQ(a.data, b.data);
  EXPECT_EQ(a.checkpoint, b.checkpoint);
  EXPECT_EQ(a.log, b.log);
  const ModelConfig &m = a.model, &n = b.model;
  EXPECT_EQ(m.n_layers, n.n_layers);
  EXPECT_EQ(m.d_model, n.d_model);
  EXPECT_EQ(m.n_heads, n.n_heads);
  EXPECT_EQ(m.n_kv_heads, n.n_kv_heads);
  EXPECT_EQ(m.d_ff, n.d_ff);
  EXPECT_EQ(m.vocab_size, n.vocab_size);
  EXPECT_EQ(m.max_seq_len, n.max_seq_len);
  EXPECT_EQ(m.norm, n.norm);
  EXPECT_EQ(m.position, n.position);
  EXPECT_EQ(m.activation, n.activation);
  EXPECT_EQ(m.bias, n.bias);
  EXPECT_EQ(m.tie_embeddings, n.tie_embeddings);
  EXPECT_EQ(m.dropout, n.dropout);
  EXPECT_EQ(m.init_std, n.init_std);
  EXPECT_EQ(m.norm_eps, n.norm_eps);
  EXPECT_EQ(m.rope_theta, n.rope_theta);
  b.source = a.source;
  EXPECT_EQ(config_to_toml(b), text);
  EXPECT_EQ(b.data.train, (std::vector<WeightedPrefix>{{1.0, "tr\"ain\\x"}}));
  EXPECT_EQ(b.parallel.pipeline_layers, (std::vector<int>{1, 2}));
  EXPECT_EQ(b.train.recompute, Recompute::full);
  EXPECT_EQ(b.train.precision, Precision::bf16);
}

// Pipeline stages and schedules: each refusal names the key and what to do instead.
TEST_F(ConfigTest, PipelineRules) {
  const std::string four = "[model]\nn_layers = 4\n[parallel]\npp = 2\n";
  EXPECT_CONTAINS(load_error("[model]\nn_layers = 3\n[parallel]\npp = 2\n", "parallel.pipeline_layers", {}, 2),
                  "e.g. [1, 1]");
  EXPECT_CONTAINS(load_error(four + "pipeline_layers = [1, 2]\n", "parallel.pipeline_layers", {}, 2),
                  "adding up to model.n_layers = 4 (got 2 entries adding up to 3)");
  EXPECT_CONTAINS(load_error(four + "pipeline_layers = [4]\n", "parallel.pipeline_layers", {}, 2), "= 2 stages");
  load_error(four + "pipeline_layers = [0, 4]\n", "parallel.pipeline_layers[0]", {}, 2);
  load_error(four + "pipeline_layers = [\"a\"]\n", "parallel.pipeline_layers", {}, 2);
  EXPECT_CONTAINS(load_error(four + "pipeline_schedule = \"zero_bubble\"\n[train]\nrecompute = \"full\"\n",
                             "train.recompute", {}, 2),
                  "rebuilt twice");
  EXPECT_CONTAINS(load_error(four + "pipeline_schedule = \"zero_bubble\"\nzero_stage = 2\n", "parallel.zero_stage", {},
                             4),
                  "use zero_stage 0 or 1");
  load_error(four + "pipeline_schedule = \"zigzag\"\n", "parallel.pipeline_schedule", {}, 2);
  EXPECT_CONTAINS(load_error(four + "virtual_stages = 2\n", "parallel.virtual_stages", {}, 2), "\"interleaved\"");
  EXPECT_CONTAINS(load_error("[model]\nn_layers = 8\n[parallel]\npp = 4\nvirtual_stages = 2\npipeline_schedule = "
                             "\"interleaved\"\n[train]\nmicro_batch_size = 1\nglobal_batch_size = 6\n",
                             "parallel.pipeline_schedule", {}, 4),
                  "must be a multiple of 4");
  EXPECT_CONTAINS(load_error(four + "virtual_stages = 2\npipeline_schedule = \"interleaved\"\npipeline_layers = [2, 2]\n",
                             "parallel.pipeline_layers", {}, 2),
                  "pp · virtual_stages = 4 stages");
  load_error("[train]\nrecompute = \"most\"\n", "train.recompute");
  load_error("[train]\nrecompute_layers = -1\n", "train.recompute_layers");
  Config c = load_config(write("[model]\nn_layers = 5\n[parallel]\npp = 2\npipeline_layers = [2, 3]\n"), {});
  resolve_config(c, 2);
  EXPECT_EQ(c.parallel.pipeline_layers, (std::vector<int>{2, 3}));
}

TEST_F(ConfigTest, MixedPrecisionRules) {
  Config c = load_config(write("[train]\nprecision = \"fp16\"\n[parallel]\ngrad_reduce_dtype = \"bf16\"\n"
                               "[loss_scale]\ninitial_scale = 1024.0\nhysteresis = 1\n"), {});
  EXPECT_EQ(c.train.precision, Precision::fp16);
  EXPECT_EQ(c.parallel.grad_reduce_dtype, Precision::bf16);
  EXPECT_EQ(c.loss_scale.initial_scale, 1024.0);
  EXPECT_EQ(c.loss_scale.hysteresis, 1);
  EXPECT_EQ(c.loss_scale.growth_interval, 1000);  // Megatron's default
  EXPECT_CONTAINS(load_error("[parallel]\ngrad_reduce_dtype = \"fp16\"\n", "parallel.grad_reduce_dtype"),
                  "\"fp32\" or \"bf16\"");
  EXPECT_CONTAINS(load_error("[train]\nprecision = \"fp8\"\n", "train.precision"), "fp16");
  EXPECT_CONTAINS(load_error("[loss_scale]\ninitial_scale = 0.5\n", "loss_scale.initial_scale"),
                  "at least loss_scale.min_scale = 1");
  load_error("[loss_scale]\nmin_scale = 0.0\n", "loss_scale.min_scale");
  EXPECT_CONTAINS(load_error("[loss_scale]\nbackoff_factor = 1.0\n", "loss_scale.backoff_factor"), "in (0, 1)");
  load_error("[loss_scale]\ngrowth_factor = 1.0\n", "loss_scale.growth_factor");
  load_error("[loss_scale]\ngrowth_interval = 0\n", "loss_scale.growth_interval");
  load_error("[loss_scale]\nhysteresis = 0\n", "loss_scale.hysteresis");
}

TEST_F(ConfigTest, OnSaveFailIsContinueByDefaultOrExit) {
  EXPECT_EQ(load_config(write(""), {}).checkpoint.on_save_fail, "continue");
  EXPECT_EQ(load_config(write("[checkpoint]\non_save_fail = \"exit\"\n"), {}).checkpoint.on_save_fail, "exit");
  EXPECT_CONTAINS(load_error("[checkpoint]\non_save_fail = \"abort\"\n", "checkpoint.on_save_fail"),
                  "must be \"continue\" (report a failed save and train on) or \"exit\"");
}

TEST_F(ConfigTest, EarlyStopsNeedACheckpointFolder) {
  EXPECT_CONTAINS(load_error("[train]\nexit_after_steps = 10\n", "train.exit_after_steps"), "set checkpoint.dir");
  EXPECT_CONTAINS(load_error("[train]\nexit_duration_mins = 30.0\n", "train.exit_duration_mins"), "set checkpoint.dir");
  load_error("[train]\nexit_after_steps = -1\n", "train.exit_after_steps");
  load_error("[train]\nexit_duration_mins = -1.0\n", "train.exit_duration_mins");
  Config c = load_config(write("[train]\nexit_after_steps = 10\nexit_duration_mins = 1.5\n[checkpoint]\ndir = \"ck\"\n"), {});
  resolve_config(c, 1);
  EXPECT_EQ(c.train.exit_after_steps, 10);
  EXPECT_EQ(c.train.exit_duration_mins, 1.5);
}

TEST_F(ConfigTest, TomlHasEveryKeyInSectionOrder) {
  Config c;
  std::string text = config_to_toml(c);
  size_t last = 0;
  for (const char* s :
       {"[model]", "[moe]", "[parallel]", "[train]", "[optimizer]", "[data]", "[checkpoint]", "[log]"}) {
    size_t at = text.find(s);
    ASSERT_NE(at, std::string::npos) << s;
    EXPECT_GT(at, last == 0 ? 0 : last) << s;
    last = at;
  }
  for (const char* k : {"n_layers =", "rope_theta =", "n_experts =", "residual =", "ep =", "eval_steps =",
                        "decay_norms_and_biases =", "shuffle =", "split =", "cache_dir =", "async =",
                        "peak_tflops ="})
    EXPECT_CONTAINS(text, k);
}

TEST_F(ConfigTest, UnknownKeySuggestsClosest) {
  std::string msg = load_error("[model]\nn_head = 4\n", "'model.n_head'");
  EXPECT_CONTAINS(msg, "did you mean 'model.n_heads'?");
  EXPECT_CONTAINS(msg, "Config reference");
  msg = load_error("[model]\nseq_len = 4\n", "'model.seq_len'");  // right key, wrong section
  EXPECT_CONTAINS(msg, "did you mean 'train.seq_len'?");
  msg = load_error("", "'optimizer.learning_rate'", {"optimizer.learning_rate=1"});
  EXPECT_CONTAINS(msg, "--set");
}

TEST_F(ConfigTest, UnknownSection) {
  EXPECT_CONTAINS(load_error("[modle]\nn_layers = 2\n", "modle"), "did you mean 'model'?");
  EXPECT_CONTAINS(load_error("", "modl", {"modl.n_layers=2"}), "unknown section");
  EXPECT_CONTAINS(load_error("seed = 3\n", "'seed'"), "did you mean 'train.seed'?");
  load_error("model = 3\n", "'model'");
}

TEST_F(ConfigTest, WrongType) {
  EXPECT_CONTAINS(load_error("[model]\nn_layers = \"four\"\n", "'model.n_layers'"),
                  "must be an integer, got string \"four\"");
  EXPECT_CONTAINS(load_error("[model]\nn_layers = 4.0\n", "'model.n_layers'"), "must be an integer, got float 4.0");
  EXPECT_CONTAINS(load_error("", "'model.n_layers'", {"model.n_layers=four"}), "(from --set)");
  load_error("[model]\nbias = 1\n", "'model.bias'");
  load_error("[data]\ntrain = 3\n", "'data.train'");
  load_error("[optimizer]\nlr = \"big\"\n", "'optimizer.lr'");
  load_error("[train]\nseed = -1\n", "'train.seed'");
  load_error("[train]\nseq_len = 4294967296\n", "'train.seq_len'");
  load_error("[optimizer]\nlr = nan\n", "'optimizer.lr'");
}

TEST_F(ConfigTest, BadEnumSpelling) {
  EXPECT_CONTAINS(load_error("[model]\nnorm = \"rms\"\n", "'model.norm'"), "must be one of \"layernorm\", \"rmsnorm\"");
  load_error("", "'optimizer.decay'", {"optimizer.decay=exp"});
  load_error("[model]\nposition = 1\n", "'model.position'");
}

TEST_F(ConfigTest, SingleFieldRules) {
  load_error("[model]\nn_layers = 0\n", "model.n_layers");
  load_error("[model]\ndropout = 1.0\n", "model.dropout");
  load_error("[model]\ndropout = -0.1\n", "model.dropout");
  load_error("[optimizer]\nlr = -1\n", "optimizer.lr");
  load_error("[optimizer]\nbeta2 = 1\n", "optimizer.beta2");
  load_error("[train]\nmicro_batch_size = 0\n", "train.micro_batch_size");
  load_error("[parallel]\ndp = -1\n", "parallel.dp");
}

TEST_F(ConfigTest, HeadsMustDivide) {
  EXPECT_CONTAINS(load_error("[model]\nd_model = 128\nn_heads = 6\n", "model.n_heads"),
                  "model.n_heads = 6 does not divide model.d_model = 128; pick n_heads from the divisors");
  EXPECT_CONTAINS(load_error("[model]\nn_heads = 4\nn_kv_heads = 3\n", "model.n_kv_heads"),
                  "does not divide model.n_heads = 4");
  load_error("[model]\nd_model = 12\nn_heads = 4\nposition = \"rope\"\n", "model.position");
}

// Context parallelism: 2·cp equal chunks per sequence (2·cp·tp with sequence parallelism), heads for
// all_to_all, and what is not built with it yet — each refused naming the keys and the fix.
TEST_F(ConfigTest, ContextParallelRules) {
  const std::string model = "[model]\nn_heads = 4\nn_kv_heads = 2\nd_model = 64\nmax_seq_len = 256\n";
  EXPECT_CONTAINS(load_error(model + "[parallel]\ncp = 3\n[train]\nseq_len = 128\n", "parallel.cp", {}, 3),
                  "train.seq_len = 128 is not a multiple of 6");
  EXPECT_CONTAINS(load_error(model + "[parallel]\ncp = 2\ntp = 2\nsequence_parallel = true\n[train]\nseq_len = 132\n",
                             "train.seq_len", {}, 4),
                  "multiple of 2·cp·tp = 8");
  EXPECT_CONTAINS(load_error(model + "[parallel]\ncp = 4\ncp_comm = \"all_to_all\"\n", "parallel.cp_comm", {}, 4),
                  "use cp_comm = \"ring\"");
  load_error(model + "[parallel]\ncp_comm = \"p2p\"\n", "parallel.cp_comm");
  Config c = load_config(write(model + "[parallel]\ncp = 2\ncp_comm = \"all_to_all\"\n"), {});
  resolve_config(c, 4);
  EXPECT_EQ(c.parallel.dp, 2);
  EXPECT_EQ(c.parallel.cp_comm, CpComm::all_to_all);
}

TEST_F(ConfigTest, CrossFieldRules) {
  load_error("[train]\nseq_len = 512\n[model]\nmax_seq_len = 256\n", "train.seq_len");
  load_error("[parallel]\ndp = 2\n", "parallel.dp", {}, 4);
  load_error("[train]\nmicro_batch_size = 4\nglobal_batch_size = 10\n", "train.global_batch_size", {}, 1);
  load_error("[optimizer]\nlr = 1e-4\nmin_lr = 1e-3\n", "optimizer.min_lr");
  load_error("[optimizer]\nwarmup_steps = 200\n[train]\nsteps = 100\n", "optimizer.warmup_steps");
  load_error("[train]\neval_interval = 10\n", "data.valid");
  load_error("[checkpoint]\nsave_interval = 10\n", "checkpoint.dir");
}

// Tensor parallelism against the model's dimensions: each message names the key and the fix.
TEST_F(ConfigTest, TensorParallelSizeMustSplitTheModel) {
  EXPECT_CONTAINS(load_error("[model]\nn_heads = 4\n[parallel]\ntp = 8\n", "model.n_heads", {}, 8),
                  "parallel.tp = 8 does not divide model.n_heads = 4");
  EXPECT_CONTAINS(load_error("[model]\nd_model = 96\nn_heads = 6\nn_kv_heads = 3\n[parallel]\ntp = 2\n",
                             "model.n_kv_heads", {}, 2),
                  "one divides the other");
  EXPECT_CONTAINS(load_error("[model]\nn_heads = 8\nd_ff = 100\n[parallel]\ntp = 8\n", "model.d_ff", {}, 8),
                  "multiple of tp");
  EXPECT_CONTAINS(load_error("[train]\nmicro_batch_size = 1\nseq_len = 5\n[parallel]\ntp = 2\nsequence_parallel = true\n",
                             "parallel.sequence_parallel", {}, 2),
                  "multiple of tp");
  // Accepted: key/value heads fewer than tp (replicated), tp·dp = world.
  Config c = load_config(write("[model]\nn_heads = 4\nn_kv_heads = 1\n[parallel]\ntp = 4\n"), {});
  resolve_config(c, 8);
  EXPECT_EQ(c.parallel.dp, 2);
}

TEST_F(ConfigTest, MalformedOverride) {
  EXPECT_CONTAINS(load_error("", "--set 'model.n_layers'", {"model.n_layers"}), "expected section.key=value");
  load_error("", "--set 'n_layers=3'", {"n_layers=3"});
  load_error("", "--set '=3'", {"=3"});
}

TEST_F(ConfigTest, MissingFile) {
  std::string path = (dir_ / "nope.toml").string();
  std::string msg = test::input_error_of([&] { load_config(path, {}); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "cannot open config file (No such file or directory)");
}

TEST_F(ConfigTest, SyntaxErrorReportsLineAndColumn) {
  std::string path = write("[model]\nn_layers = 4\nd_model = = 3\n");
  std::string msg = test::input_error_of([&] { load_config(path, {}); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "line 3");
  EXPECT_CONTAINS(msg, "column");
}

}  // namespace
}  // namespace megatrain
