// The training and validation data of one run, built from the [data] and [train] config: the
// datasets, the sample sequence over them and this data-parallel rank's loaders.
// Invariant: loader.load(step, micro, …) is a pure function of the config, the data files and the
// rank layout, so the consumed-sample count stored in a checkpoint is the whole loader state.
#pragma once
#include <cstdint>
#include <memory>

#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/loader.h"
#include "trainer/config.h"

namespace megatrain {

class TrainData {
 public:
  // Opens the files named by cfg.data (InputError naming the key and the file when one is bad) and
  // builds the loaders of data-parallel rank `dp_rank` of `dp`.
  TrainData(const Config& cfg, int dp_rank, int dp);
  TrainData(const TrainData&) = delete;
  TrainData& operator=(const TrainData&) = delete;

  const BatchLoader& train() const { return *train_loader_; }
  // nullptr when data.valid is empty.
  const BatchLoader* valid() const { return valid_loader_.get(); }
  // For the start-up log line.
  int64_t train_tokens() const { return train_data_->num_tokens(); }
  int64_t train_samples_per_epoch() const { return train_set_->num_samples_per_epoch(); }

 private:
  std::unique_ptr<IndexedDataset> train_data_, valid_data_;
  std::unique_ptr<GptDataset> train_set_, valid_set_;
  std::unique_ptr<BatchLoader> train_loader_, valid_loader_;
};

}  // namespace megatrain
