// EXPECT_CONTAINS(text, part): the test expects `part` as a substring of `text` and prints the
// whole text when it is not (plain GoogleTest, no gmock needed).
#pragma once
#include <gtest/gtest.h>

#include <string>

#define EXPECT_CONTAINS(text, part)                                                                           \
  do {                                                                                                        \
    const std::string mt_text_ = (text);                                                                      \
    EXPECT_NE(mt_text_.find(part), std::string::npos) << "expected \"" << (part) << "\" in:\n  " << mt_text_; \
  } while (0)
