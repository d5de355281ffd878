// metrics_file_keep_through (trainer/metrics.h): a resumed run's metrics file keeps the rows up to
// the checkpoint's step, drops a line cut off mid-write, and refuses a file that is not its own.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/expect_contains.h"
#include "tests/input_error.h"
#include "tests/temp_dir.h"
#include "trainer/metrics.h"

namespace megatrain {
namespace {

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
std::string read(const std::string& path) {
  std::ostringstream s;
  s << std::ifstream(path, std::ios::binary).rdbuf();
  return s.str();
}

TEST(MetricsFile, KeepsRowsThroughTheStepAndDropsTheRest) {
  const test::TempDir dir("metrics");
  const std::string p = (dir / "keep.jsonl").string();
  write(p, "{\"step\":1,\"loss\":3}\n{\"step\":2,\"loss\":2}\n{\"step\":2,\"val_loss\":2.5}\n{\"step\":3,\"loss\":1}\n");
  metrics_file_keep_through(p, 2);
  EXPECT_EQ(read(p), "{\"step\":1,\"loss\":3}\n{\"step\":2,\"loss\":2}\n{\"step\":2,\"val_loss\":2.5}\n");
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
}

TEST(MetricsFile, DropsALastLineCutOffMidWrite) {
  const test::TempDir dir("metrics");
  const std::string p = (dir / "cut.jsonl").string();
  write(p, "{\"step\":1,\"loss\":3}\n{\"step\":2,\"lo");
  metrics_file_keep_through(p, 5);
  EXPECT_EQ(read(p), "{\"step\":1,\"loss\":3}\n");
}

TEST(MetricsFile, RefusesAFileThatIsNotMetricsNamingTheLine) {
  const test::TempDir dir("metrics");
  const std::string p = (dir / "foreign.jsonl").string();
  write(p, "{\"step\":1,\"loss\":3}\nhello\n");
  EXPECT_CONTAINS(test::input_error_of([&] { metrics_file_keep_through(p, 5); }), p + ":2: not a metrics row");
  EXPECT_EQ(read(p), "{\"step\":1,\"loss\":3}\nhello\n") << "the file must be left as it was";
}

TEST(MetricsFile, MissingFileStaysMissing) {
  const test::TempDir dir("metrics");
  const std::string p = (dir / "none.jsonl").string();
  std::filesystem::remove(p);
  metrics_file_keep_through(p, 5);
  EXPECT_FALSE(std::filesystem::exists(p));
}

}  // namespace
}  // namespace megatrain
