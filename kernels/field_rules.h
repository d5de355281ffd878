// FieldRules: single-field checks of a config read from `file`; each failure is an InputError
// reading "FILE: KEY = VALUE must be RULE[ NOTE]". Shared by the model's rules (model/config.h) and
// the run config's (config/config.h), so every message has one form.
#pragma once
#include <fmt/format.h>

#include <string>
#include <string_view>

#include "kernels/check.h"

namespace megatrain {

struct FieldRules {
  const std::string& file;

  template <class T>
  void check(bool ok, std::string_view key, T value, std::string_view rule, std::string_view note) const {
    if (ok) return;
    throw InputError(fmt::format("{}: {} = {} must be {}{}{}", file, key, value, rule, note.empty() ? "" : " ", note));
  }
  template <class T>
  void at_least(std::string_view key, T value, T lo, std::string_view note = "") const {
    check(value >= lo, key, value, fmt::format("at least {}", lo), note);
  }
  void positive(std::string_view key, double value) const { check(value > 0, key, value, "greater than 0", ""); }
  void unit_interval(std::string_view key, double value) const {  // [0, 1)
    check(value >= 0 && value < 1, key, value, "in [0, 1)", "");
  }
};

}  // namespace megatrain
