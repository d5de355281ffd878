// Tests of the document split (Megatron's get_split_indices): parsing, the rounding rule, and that
// the three ranges always partition the documents.
#include <gtest/gtest.h>

#include <array>

#include "data/doc_split.h"

namespace megatrain {
namespace {

TEST(SplitTest, ParsesOneToThreeProportions) {
  EXPECT_EQ(parse_doc_split("98,1,1"), (std::array<double, 3>{0.98, 0.01, 0.01}));
  EXPECT_EQ(parse_doc_split("1"), (std::array<double, 3>{1.0, 0.0, 0.0}));
  EXPECT_EQ(parse_doc_split(" 3 , 1"), (std::array<double, 3>{0.75, 0.25, 0.0}));
  EXPECT_EQ(parse_doc_split("0.5,0.25,0.25"), (std::array<double, 3>{0.5, 0.25, 0.25}));
  for (const char* bad : {"", ",", "a", "1,,1", "1,1,1,1", "-1,2", "0,0,0", "1;2", "1,2,", "inf,1", "nan"})
    EXPECT_FALSE(parse_doc_split(bad)) << '"' << bad << '"';
}

TEST(SplitTest, RangesFollowMegatronRounding) {
  using R = std::array<DocRange, 3>;
  EXPECT_EQ(split_documents(*parse_doc_split("98,1,1"), 1000), (R{DocRange{0, 980}, {980, 990}, {990, 1000}}));
  // round(3.3) = 3 three times: boundaries 0, 3, 6, 9, shifted by 1 so the last ends at 10.
  EXPECT_EQ(split_documents(*parse_doc_split("33,33,34"), 10), (R{DocRange{0, 4}, {4, 7}, {7, 10}}));
  // Half rounds to even (Python's round): round(2.5) = 2, so 0, 2, 4, 4, shifted by 1.
  EXPECT_EQ(split_documents(*parse_doc_split("1,1,0"), 5), (R{DocRange{0, 3}, {3, 5}, {5, 5}}));
  EXPECT_EQ(split_documents(*parse_doc_split("1"), 7), (R{DocRange{0, 7}, {7, 7}, {7, 7}}));
  EXPECT_EQ(split_documents(*parse_doc_split("98,1,1"), 0), (R{DocRange{0, 0}, {0, 0}, {0, 0}}));
}

TEST(SplitTest, RangesPartitionTheDocuments) {
  for (const char* text : {"98,1,1", "969,30,1", "1,1,1", "0,1,0", "5,3", "0.1,0.45,0.45", "1,0,1"})
    for (int64_t n = 0; n < 300; ++n) {
      const auto r = split_documents(*parse_doc_split(text), n);
      ASSERT_EQ(r[0].begin, 0) << text << " n=" << n;
      ASSERT_EQ(r[0].end, r[1].begin) << text << " n=" << n;
      ASSERT_EQ(r[1].end, r[2].begin) << text << " n=" << n;
      ASSERT_EQ(r[2].end, n) << text << " n=" << n;
      for (const DocRange& x : r) ASSERT_GE(x.size(), 0) << text << " n=" << n;
    }
}

}  // namespace
}  // namespace megatrain
