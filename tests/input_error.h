// input_error_of(f): the message of the InputError that f throws; a test failure (and "") when it
// throws none. The shared way tests look at what a user would read.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "kernels/check.h"

namespace megatrain::test {

template <class F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

}  // namespace megatrain::test
