// Gradient compression end to end (parallel.grad_compression, optim/compress/grad_compression.h): on 2
// data-parallel ranks, 40 steps of the tiny model with PowerSGD (r = 4) and with onebit against
// the exact all-reduce. Each compressed run trains (finite losses, the last five steps' mean below
// the first five's by at least half as much as the exact run's drop), really compresses (its
// losses differ from the exact run's; its data-parallel bytes per step are below the exact run's
// by the factor the formulas give), and reruns bitwise. A config asking for compression with ZeRO
// stage 1 is refused naming the keys.
#include <gtest/gtest.h>

#include "tests/e2e/e2e_fixture.h"

namespace megatrain {
namespace {
using json = nlohmann::json;

double mean_loss(const std::vector<json>& rows, int64_t first, int64_t last) {
  double sum = 0.0;
  int n = 0;
  for (const json& j : rows)
    if (j.contains("loss") && j["step"].get<int64_t>() >= first && j["step"].get<int64_t>() <= last) {
      sum += j["loss"].get<double>();
      ++n;
    }
  return n > 0 ? sum / n : 0.0;
}

class CompressionE2E : public test::TrainE2E {
 protected:
  std::vector<json> run(const std::string& method, const std::string& name) {
    return train_mpi(2,
                     "--set train.steps=40 --set train.eval_interval=0 --set model.dropout=0.0 "
                     "--set parallel.grad_compression=" + method,
                     name);
  }
};

TEST_F(CompressionE2E, PowerSgdAndOneBitTrainWithFewerBytes) {
  const auto exact = run("none", "exact");
  const double exact_drop = mean_loss(exact, 1, 5) - mean_loss(exact, 36, 40);
  ASSERT_GT(exact_drop, 0.1);
  const double exact_bytes = exact[5]["comm_bytes"].get<double>();
  for (const std::string method : {"powersgd", "onebit"}) {
    const auto a = run(method, method + "_a");
    const auto b = run(method, method + "_b");
    ASSERT_EQ(a.size(), 40u) << method;
    test::compare_runs(a, b, 0.0, method + " rerun");
    const double drop = mean_loss(a, 1, 5) - mean_loss(a, 36, 40);
    EXPECT_GT(drop, 0.5 * exact_drop) << method << " trains: loss drop " << drop << " vs exact " << exact_drop;
    bool differs = false;
    for (size_t i = 1; i < a.size(); ++i) differs = differs || a[i]["loss"] != exact[i]["loss"];
    EXPECT_TRUE(differs) << method << " gives the exact run's losses: not compressing";
    const double bytes = a[5]["comm_bytes"].get<double>();
    // onebit: 1/32 of the floats' bytes plus a scale per 2048 values; PowerSGD r = 4 on 64-wide
    // matrices: at most r·(rows + cols)/(rows·cols) = 1/8 of them, plus the vectors sent exactly.
    EXPECT_LT(bytes, (method == "onebit" ? 0.05 : 0.35) * exact_bytes) << method << " bytes per step " << bytes
                                                                     << " vs exact " << exact_bytes;
  }
}

TEST_F(CompressionE2E, CompressionOutsideZeroStageZeroIsRefused) {
  const auto r = test::run_megatrain("train --config " + config_.string() +
                                     " --set parallel.zero_stage=1 --set parallel.grad_compression=powersgd");
  EXPECT_EQ(r.code, 64) << r.output;
  EXPECT_NE(r.output.find("parallel.grad_compression = \"powersgd\" compresses ZeRO stage 0"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("set zero_stage = 0"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace megatrain
