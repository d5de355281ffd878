// manifest.json (checkpoint/manifest.h): what is written reads back the same, and each way a
// manifest can be wrong is refused naming the field and what was expected.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "checkpoint/manifest.h"
#include "kernels/check.h"
#include "tests/expect_contains.h"
#include "tests/input_error.h"

namespace megatrain {
namespace {

Manifest example() {
  Manifest m;
  m.step = 40;
  m.consumed_samples = 640;
  m.skipped_steps = 1;
  m.parallel_layout_json = R"({"tp":2,"pp":1,"cp":1,"ep":1,"dp":2,"world":4})";
  m.config_crc32 = 0xdeadbeef;
  m.parent_step = 30;
  m.created_utc = "2025-01-31T12:00:00Z";
  m.model_format_version = 3;
  m.model_bytes = 1587192;
  m.model_crc32 = 0xffffffff;
  m.tensors = {{"params/embed.wte", 1}, {"exp_avg/embed.wte", 0}, {"exp_avg_sq/embed.wte", 0x80000000}};
  return m;
}

// The example's JSON with `edit` applied, parsed back; the refusal's message.
template <class Edit>
std::string refusal(Edit&& edit) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(manifest_to_json(example()));
  edit(j);
  return test::input_error_of([&] { manifest_from_json(j.dump()); });
}

TEST(Manifest, ReadsBackWhatWasWritten) {
  EXPECT_EQ(manifest_from_json(manifest_to_json(example())), example());
  Manifest first = example();
  first.parent_step.reset();
  EXPECT_EQ(manifest_from_json(manifest_to_json(first)), first);
}

TEST(Manifest, EachWrongFieldIsNamed) {
  EXPECT_CONTAINS(refusal([](auto& j) { j.erase("step"); }), "field \"step\" is missing or wrong; expected an integer >= 0");
  EXPECT_CONTAINS(refusal([](auto& j) { j["consumed_samples"] = "640"; }), "field \"consumed_samples\"");
  EXPECT_CONTAINS(refusal([](auto& j) { j["files"]["model.h5"]["bytes"] = -1; }), "field \"files.model.h5.bytes\"");
  EXPECT_CONTAINS(refusal([](auto& j) { j["files"]["model.h5"]["crc32"] = 4294967296; }),
                  "field \"files.model.h5.crc32\" is missing or wrong; expected an integer in [0, 4294967295]");
  EXPECT_CONTAINS(refusal([](auto& j) { j["files"]["model.h5"]["tensors"]["params/embed.wte"] = 1.5; }),
                  "field \"files.model.h5.tensors.params/embed.wte\"");
  EXPECT_CONTAINS(refusal([](auto& j) { j["files"].erase("model.h5"); }), "field \"files.model.h5\"");
  EXPECT_CONTAINS(refusal([](auto& j) { j["parallel_layout"] = 4; }), "field \"parallel_layout\"");
  EXPECT_CONTAINS(refusal([](auto& j) { j["format"] = "zip"; }), "format is \"zip\", expected \"megatrain-checkpoint-manifest\"");
  EXPECT_CONTAINS(refusal([](auto& j) { j["format_version"] = 2; }), "format_version 2 is newer than this megatrain reads (1)");
  EXPECT_CONTAINS(test::input_error_of([] { manifest_from_json("{\"step\": 4"); }), "not valid JSON");
  EXPECT_CONTAINS(test::input_error_of([] { manifest_from_json("[]"); }), "not a JSON object");
}

}  // namespace
}  // namespace megatrain
