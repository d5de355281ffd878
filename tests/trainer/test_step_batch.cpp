// StepBatch (trainer/step_batch.h): a step's micro-batches loaded before the schedule, against the
// loader read micro-batch by micro-batch — the whole sequences at cp = 1, each cp rank's rows
// (CpSplit::take_local) under context parallelism, every rank's rows together the sequence — and the
// digest, which is the samples' and not the layout's.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "data/loader.h"
#include "kernels/ops.h"
#include "trainer/step_batch.h"

namespace megatrain {
namespace {

// Sample i's token t is 1000·i + t: where a token came from can be read off it.
class Numbered final : public SampleSource {
 public:
  int seq_len() const override { return 8; }
  int64_t num_samples() const override { return 1000; }
  void read_sample(int64_t i, int32_t* out, uint8_t* learned) const override {
    for (int t = 0; t <= seq_len(); ++t) out[t] = static_cast<int32_t>(1000 * i + t);
    if (learned != nullptr) std::fill_n(learned, seq_len() + 1, uint8_t{1});
  }
};

TEST(StepBatch, HoldsEveryMicroBatchAsTheLoaderGivesItOrThisCpRanksRowsOfIt) {
  const Numbered data;
  const int B = 2, G = 8;  // 4 micro-batches at dp = 1
  const BatchLoader loader(data, B, G, 0, 1);
  const int S = data.seq_len(), micro = loader.max_micro_batches();
  std::vector<int32_t> in(static_cast<size_t>(B * S)), tg(in.size());
  for (int cp : {1, 2}) {
    std::vector<int> seen(static_cast<size_t>(S), 0);
    for (int rank = 0; rank < cp; ++rank) {
      const CpSplit split{cp, rank, S};
      StepBatch batch(split, B, micro, true);
      batch.load(loader, 3, true);
      EXPECT_EQ(batch.batch(), 3);
      EXPECT_EQ(batch.digest().samples, G);
      for (int m = 0; m < micro; ++m) {
        loader.load(3, m, in.data(), tg.data());
        for (int b = 0; b < B; ++b)
          for (int t = 0; t < split.local_len(); ++t) {
            const int at = cp == 1 ? t : split.position(t);
            ASSERT_EQ(batch.tokens(m)[b * split.local_len() + t], in[static_cast<size_t>(b * S + at)]);
            ASSERT_EQ(batch.targets(m)[b * split.local_len() + t], tg[static_cast<size_t>(b * S + at)]);
            if (m == 0 && b == 0 && cp == 2) ++seen[static_cast<size_t>(at)];
          }
      }
    }
    if (cp == 2) {
      for (int n : seen) EXPECT_EQ(n, 1);
    }
  }
  // The digest depends on the samples, not on the split; another batch's differs; a rank that
  // reads nothing holds nothing.
  StepBatch a(CpSplit{1, 0, S}, B, micro, true), b(CpSplit{2, 1, S}, B, micro, true), c(CpSplit{1, 0, S}, B, micro, true);
  a.load(loader, 5, true);
  b.load(loader, 5, true);
  c.load(loader, 6, true);
  EXPECT_EQ(a.digest().sum, b.digest().sum);
  EXPECT_NE(a.digest().sum, c.digest().sum);
  StepBatch none(CpSplit{1, 0, S}, B, micro, false);
  none.load(loader, 5, true);
  EXPECT_EQ(none.tokens(0), nullptr);
  EXPECT_EQ(none.digest().samples, 0);
}

// Documents (data/packed_documents.h): each micro-batch's starts over its whole sequences, the
// targets whose input is the end-of-document token masked — at cp = 1 and on each cp rank's rows —
// and the count of the targets left; a rank that neither embeds nor computes the loss reads them too.
TEST(StepBatch, FindsEachSequencesDocumentsAndMasksTheTargetsAfterAnEndOfDocument) {
  const Numbered data;
  const int B = 2, G = 4, S = data.seq_len();
  const BatchLoader loader(data, B, G, 0, 1);
  const int micro = loader.max_micro_batches();
  const int32_t eod = 3003;  // sample 3's token 3: the documents of sample 3 are [0, 4) [4, 8)
  std::vector<int32_t> in(static_cast<size_t>(B * S)), tg(in.size());
  for (int cp : {1, 2}) {
    int64_t counted = 0;
    for (int rank = 0; rank < cp; ++rank) {
      const CpSplit split{cp, rank, S};
      StepBatch batch(split, B, micro, false, DocumentRules{eod, true, true, true});
      batch.load(loader, 0, false);  // samples 0 … 3
      ASSERT_NE(batch.tokens(0), nullptr) << "a rank without the ends reads the documents too";
      counted += batch.counted();
      for (int m = 0; m < micro; ++m) {
        loader.load(0, m, in.data(), tg.data());
        for (int b = 0; b < B; ++b) {
          const bool has_eod = loader.sample_index(0, m, b) == 3;
          for (int t = 0; t < S; ++t)
            EXPECT_EQ(batch.starts(m)[b * S + t], has_eod && t >= 4 ? 4 : 0);
          for (int t = 0; t < split.local_len(); ++t) {
            const int at = cp == 1 ? t : split.position(t);
            const int32_t want = in[static_cast<size_t>(b * S + at)] == eod ? kMaskedTarget : tg[static_cast<size_t>(b * S + at)];
            EXPECT_EQ(batch.targets(m)[b * split.local_len() + t], want);
          }
        }
      }
    }
    EXPECT_EQ(counted, G * S - 1) << "cp " << cp;  // sample 3's target after its end of document
  }
}

}  // namespace
}  // namespace megatrain
