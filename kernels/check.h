// Errors: MT_CHECK(cond, fmt, ...) throws megatrain::Error carrying file, line, the failed
// expression and a message that says what to do. Library code never exits; main catches once.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace megatrain {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Bad user input (config, data file, flag): the message alone is enough, no source location.
class InputError : public Error {
 public:
  explicit InputError(const std::string& what) : Error(what) {}
};

[[noreturn]] void check_failed(const char* file, int line, const char* expr, const std::string& msg);

}  // namespace megatrain

#define MT_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond)) [[unlikely]]                                                            \
      ::megatrain::check_failed(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
  } while (0)

#define MT_INPUT_CHECK(cond, ...)                                          \
  do {                                                                     \
    if (!(cond)) [[unlikely]]                                              \
      throw ::megatrain::InputError(::fmt::format(__VA_ARGS__));           \
  } while (0)
