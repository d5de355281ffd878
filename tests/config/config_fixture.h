// The fixture of the config tests: writes TOML text to a file and loads it, and checks that an
// error names the file and the key.
#pragma once
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "config/config.h"
#include "tests/expect_contains.h"
#include "tests/input_error.h"
#include "tests/temp_dir.h"

namespace megatrain::test {

class ConfigTest : public ::testing::Test {
 protected:
  std::string write(const std::string& text, const std::string& name = "x.toml") {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  // Message of load_config + resolve_config(world) on TEXT; checks it names the file and KEY.
  std::string load_error(const std::string& text, const std::string& key, std::vector<std::string> sets = {},
                         int world = 1) {
    std::string path = write(text);
    std::string msg = test::input_error_of([&] {
      Config c = load_config(path, sets);
      resolve_config(c, world);
    });
    EXPECT_CONTAINS(msg, path);
    EXPECT_CONTAINS(msg, key);
    return msg;
  }

  test::TempDir dir_{"config"};
};

}  // namespace megatrain::test
