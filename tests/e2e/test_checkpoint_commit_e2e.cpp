// The checkpoint commit protocol end to end (docs/robustness.md R07): under strace, a save's durable
// steps come in the order model.h5 fsync → manifest.json fsync → folder fsync → rename of
// step_N.tmp → DIR fsync → rename of latest; afterwards DIR holds only committed folders and
// `latest`, every manifest says what its model.h5 is, and `megatrain checkpoint verify` passes.
#include <nlohmann/json.hpp>

#include <fstream>
#include <regex>
#include <sstream>

#include "tests/e2e/checkpoint_fixture.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {
namespace fs = std::filesystem;

class CheckpointCommitE2E : public test::CheckpointE2E {};

// The lines of an `strace -f -y` log, as "fsync PATH" or "rename FROM TO", of calls that succeeded.
std::vector<std::string> durable_calls(const fs::path& log) {
  static const std::regex fsync(R"(^\d+\s+f(?:data)?sync\(\d+<([^>]*)>\)\s+= 0)");
  static const std::regex rename(R"rx(^\d+\s+rename(?:at2?)?\((?:[^,]*, )?"([^"]*)", (?:[^,]*, )?"([^"]*)".*\)\s+= 0)rx");
  std::vector<std::string> calls;
  std::ifstream in(log);
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_search(line, m, fsync)) calls.push_back("fsync " + m[1].str());
    else if (std::regex_search(line, m, rename)) calls.push_back("rename " + m[1].str() + " " + m[2].str());
  }
  return calls;
}

TEST_F(CheckpointCommitE2E, ASaveIsDurableInOrderAndLeavesOnlyCommittedFolders) {
  if (test::run_shell("strace -V").code != 0) GTEST_SKIP() << "strace is not installed (scripts/setup.sh installs it)";
  const fs::path d = dir_ / "ckpt", log = dir_ / "strace.log";
  const auto r = train_raw("--set train.steps=2 --set checkpoint.save_interval=2 " + ckpt(d, ""),
                           "strace -f -y -e trace=fsync,fdatasync,rename,renameat,renameat2 -o " + log.string() + " ");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string tmp = (d / "step_0000002.tmp").string(), step = (d / "step_0000002").string();
  const std::vector<std::string> expected = {"fsync " + tmp + "/model.h5",
                                             "fsync " + tmp + "/manifest.json",
                                             "fsync " + tmp,
                                             "rename " + tmp + " " + step,
                                             "fsync " + d.string(),
                                             "fsync " + d.string() + "/latest.tmp",
                                             "rename " + d.string() + "/latest.tmp " + d.string() + "/latest",
                                             "fsync " + d.string()};
  std::vector<std::string> seen;  // the calls on the checkpoint folder, the last fsync of each path before the next kind
  for (const std::string& c : durable_calls(log))
    if (c.find(d.string()) != std::string::npos && (seen.empty() || seen.back() != c)) seen.push_back(c);
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(names_in(d), (std::vector<std::string>{"latest", "step_0000002"}));
  const auto v = test::run_megatrain("checkpoint verify " + d.string());
  EXPECT_EQ(v.code, 0) << v.output;
  EXPECT_CONTAINS(v.output, "OK step=2 " + step);
}

// The manifest names what was saved and what model.h5 must be; a second save names the first as
// its parent.
TEST_F(CheckpointCommitE2E, TheManifestDescribesTheSaveAndItsModelFile) {
  const fs::path d = dir_ / "m";
  const auto r = train_raw("--set train.steps=4 --set checkpoint.save_interval=2 " + ckpt(d, ""));
  ASSERT_EQ(r.code, 0) << r.output;
  const auto first = nlohmann::json::parse(bytes_of(d / "step_0000002" / "manifest.json"));
  const auto m = nlohmann::json::parse(bytes_of(d / "step_0000004" / "manifest.json"));
  EXPECT_EQ(m["format"], "megatrain-checkpoint-manifest");
  EXPECT_EQ(m["format_version"], 1);
  EXPECT_EQ(m["step"], 4);
  EXPECT_EQ(m["consumed_samples"], 4 * 16);
  EXPECT_EQ(m["skipped_steps"], 0);
  EXPECT_TRUE(first["parent_step"].is_null());
  EXPECT_EQ(m["parent_step"], 2);
  EXPECT_EQ(m["parallel_layout"]["world"], 1);
  EXPECT_EQ(m["config_crc32"], first["config_crc32"]);
  EXPECT_TRUE(std::regex_match(m["created_utc"].get<std::string>(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));
  const auto& model = m["files"]["model.h5"];
  EXPECT_EQ(model["bytes"], fs::file_size(d / "step_0000004" / "model.h5"));
  EXPECT_EQ(model["format_version"], 3);
  state_of(d / "step_0000004");
  EXPECT_EQ(model["tensors"].size(), 3 * layout_.size());  // params, exp_avg, exp_avg_sq
  EXPECT_TRUE(model["tensors"]["exp_avg_sq/embed.wte"].is_number_unsigned());
}

}  // namespace
}  // namespace megatrain
