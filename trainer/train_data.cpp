#include "trainer/train_data.h"

#include "kernels/check.h"

namespace megatrain {
namespace {

std::unique_ptr<IndexedDataset> open_dataset(const Config& cfg, const std::string& field, const std::string& prefix) {
  try {
    return std::make_unique<IndexedDataset>(IndexedDataset::open(prefix));
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {} = \"{}\": {}", cfg.source, field, prefix, e.what()));
  }
}

}  // namespace

TrainData::TrainData(const Config& c, int dp_rank, int dp) {
  const int B = c.train.micro_batch_size, G = c.train.global_batch_size;
  train_data_ = open_dataset(c, "data.train", c.data.train);
  train_set_ = std::make_unique<GptDataset>(*train_data_, c.train.seq_len, c.data.shuffle, c.train.seed);
  train_loader_ = std::make_unique<BatchLoader>(*train_set_, B, G, dp_rank, dp);
  if (c.data.valid.empty()) return;
  valid_data_ = open_dataset(c, "data.valid", c.data.valid);
  valid_set_ = std::make_unique<GptDataset>(*valid_data_, c.train.seq_len, false, c.train.seed);
  valid_loader_ = std::make_unique<BatchLoader>(*valid_set_, B, G, dp_rank, dp);
}

}  // namespace megatrain
