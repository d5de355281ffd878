// TempDir: the one temporary folder a test writes into. A fresh, empty folder under the system temp
// directory, named after the caller's tag, the process id and the running test (so parallel ctest
// processes and parameterised cases never share one), removed with its contents when it goes out of
// scope. Converts to the std::filesystem::path it names.
#pragma once
#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <string>
#include <system_error>

namespace megatrain::test {

class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    std::string name = "megatrain_" + tag + "_" + std::to_string(::getpid());
    if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info())
      name += std::string("_") + info->test_suite_name() + "_" + info->name();
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') c = '_';
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  operator const std::filesystem::path&() const { return path_; }
  std::filesystem::path operator/(const std::filesystem::path& name) const { return path_ / name; }
  std::string string() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace megatrain::test
