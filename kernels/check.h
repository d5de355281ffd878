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

// Bad user input: the message alone is enough, no source location. InputError itself is a bad
// config or command line; the two kinds below name the input file that is at fault. main maps each
// to its exit code (health/exit_codes.h).
class InputError : public Error {
 public:
  explicit InputError(const std::string& what) : Error(what) {}
};
// A dataset, tokenizer, text or model file that cannot be used as it is.
class DataError : public InputError {
 public:
  using InputError::InputError;
};
// A checkpoint that cannot be loaded (missing, damaged, not a checkpoint).
class CheckpointError : public InputError {
 public:
  using InputError::InputError;
};

[[noreturn]] void check_failed(const char* file, int line, const char* expr, const std::string& msg);

}  // namespace megatrain

#define MT_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond)) [[unlikely]]                                                            \
      ::megatrain::check_failed(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
  } while (0)

// Throws ErrorType(message) unless cond: the input checks below, one per kind of input.
#define MT_THROW_UNLESS(ErrorType, cond, ...)                    \
  do {                                                           \
    if (!(cond)) [[unlikely]]                                    \
      throw ::megatrain::ErrorType(::fmt::format(__VA_ARGS__));  \
  } while (0)

#define MT_INPUT_CHECK(cond, ...) MT_THROW_UNLESS(InputError, cond, __VA_ARGS__)
#define MT_DATA_CHECK(cond, ...) MT_THROW_UNLESS(DataError, cond, __VA_ARGS__)
#define MT_CHECKPOINT_CHECK(cond, ...) MT_THROW_UNLESS(CheckpointError, cond, __VA_ARGS__)
