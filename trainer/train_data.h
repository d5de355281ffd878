// The training and validation data of one run, built from the [data] and [train] config: the
// indexed datasets, their split ranges, the blended sample sequences over them (sample indices
// loaded from or saved to the cache) and this data-parallel rank's loaders.
// Invariant: loader.load(step, micro, …) is a pure function of the config, the data files and the
// rank layout, so the consumed-sample count stored in a checkpoint is the whole loader state.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "config/config.h"
#include "data/blended_dataset.h"
#include "data/indexed_dataset.h"
#include "data/loader.h"

namespace megatrain {

class TrainData {
 public:
  // Opens the files named by cfg.data (InputError naming the key and the file when one is bad) and
  // builds the loaders of data-parallel rank `dp_rank` of `dp`: training over train.steps global
  // batches (ramped up by train.rampup_batch_size), validation (only when train.eval_interval > 0)
  // over train.eval_steps global batches of train.global_batch_size.
  // Data-parallel rank 0 writes missing sample-index cache files and logs how the indices were
  // obtained; every rank loads or builds its own copy.
  TrainData(const Config& cfg, int dp_rank, int dp);
  TrainData(const TrainData&) = delete;
  TrainData& operator=(const TrainData&) = delete;

  const BatchLoader& train() const { return *train_loader_; }
  // nullptr when there is no validation data or train.eval_interval = 0.
  const BatchLoader* valid() const { return valid_loader_.get(); }
  // For the start-up log line: tokens of the training documents, and samples per epoch, summed
  // over the blended datasets.
  int64_t train_tokens() const;
  int64_t train_samples_per_epoch() const;

 private:
  std::map<std::string, std::unique_ptr<IndexedDataset>> files_;  // by prefix, each opened once
  std::unique_ptr<BlendedDataset> train_set_, valid_set_;
  std::unique_ptr<BatchLoader> train_loader_, valid_loader_;
};

}  // namespace megatrain
