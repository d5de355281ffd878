// Builds the run's datasets and loaders from [data] (behaviour in train_data.h).
// Invariant: the same config and files give the same sample sequence on every rank and every run.
#include "trainer/train_data.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <optional>
#include <vector>

#include "config/train_batches.h"
#include "data/dataset_builder.h"
#include "data/doc_split.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

// "data.train" for a single prefix, "data.train[i]" inside a blend.
std::string entry_name(const std::string& key, const std::vector<WeightedPrefix>& blend, size_t i) {
  return blend.size() == 1 ? key : fmt::format("{}[{}]", key, i);
}

const IndexedDataset& open_dataset(std::map<std::string, std::unique_ptr<IndexedDataset>>& files, const Config& cfg,
                                   const std::string& field, const std::string& prefix) {
  if (auto it = files.find(prefix); it != files.end()) return *it->second;
  try {
    return *files.emplace(prefix, std::make_unique<IndexedDataset>(IndexedDataset::open(prefix))).first->second;
  } catch (const DataError& e) {
    throw DataError(fmt::format("{}: {} = \"{}\": {}", cfg.source, field, prefix, e.what()));
  }
}

}  // namespace

TrainData::TrainData(const Config& c, int dp_rank, int dp) {
  const int B = c.train.micro_batch_size, G = c.train.global_batch_size;
  const BatchSizes sizes = train_batch_sizes(c);
  MT_INPUT_CHECK(!c.data.train.empty(),
                 "{}: data.train is empty; set it to a dataset prefix (megatrain preprocess "
                 "writes one) or [[weight, \"prefix\"], …]",
                 c.source);
  const auto split = c.data.split.empty() ? std::nullopt : parse_doc_split(c.data.split);
  MT_CHECK(c.data.split.empty() || split, "data.split was validated");

  // The parts of one role: each prefix of `blend` with its weight and document range.
  auto parts_of = [&](const std::string& key, const std::vector<WeightedPrefix>& blend, SplitPart part) {
    std::vector<BlendPart> parts;
    for (size_t i = 0; i < blend.size(); ++i) {
      const IndexedDataset& ds = open_dataset(files_, c, entry_name(key, blend, i), blend[i].prefix);
      const DocRange all{0, ds.num_documents()};
      parts.push_back(
          {blend[i].weight, &ds, split ? split_documents(*split, ds.num_documents())[static_cast<size_t>(part)] : all});
    }
    return parts;
  };
  auto build = [&](const std::string& key, const std::vector<BlendPart>& parts, bool shuffle, int64_t samples) {
    SampleIndexOptions o{c.train.seq_len, shuffle, c.train.seed, samples, c.data.cache_dir, true, dp_rank == 0,
                         c.data.pack};
    BuildReport report;
    std::unique_ptr<BlendedDataset> set;
    try {
      set = build_blended_dataset(parts, o, report);
    } catch (const DataError& e) {
      throw DataError(fmt::format("{}: {}{}: {}", c.source, key,
                                   split ? fmt::format(" (data.split = \"{}\")", c.data.split) : "", e.what()));
    }
    if (dp_rank == 0) {
      for (const std::string& w : report.warnings) spdlog::warn("{}: {}", key, w);
      if (report.loaded)
        spdlog::info("{}: sample index loaded from cache {} in {:.2f} s", key, report.path, report.seconds);
      else
        spdlog::info("{}: sample index built in {:.2f} s{}", key, report.seconds,
                     report.saved ? fmt::format(", saved to cache {}", report.path) : std::string());
    }
    return set;
  };

  train_set_ = build("data.train", parts_of("data.train", c.data.train, SplitPart::train), c.data.shuffle,
                     sizes.first_sample(c.train.steps + batches_reserved_for_rollbacks(c.health)));
  train_loader_ = std::make_unique<BatchLoader>(*train_set_, B, sizes, dp_rank, dp, c.model.vocab_size);
  if (c.train.eval_interval == 0) return;
  const int64_t eval_samples = int64_t{c.train.eval_steps} * G;
  if (split)
    valid_set_ = build("data.train (valid part of data.split)", parts_of("data.train", c.data.train, SplitPart::valid),
                       false, eval_samples);
  else if (!c.data.valid.empty())
    valid_set_ = build("data.valid", parts_of("data.valid", c.data.valid, SplitPart::valid), false, eval_samples);
  if (valid_set_) valid_loader_ = std::make_unique<BatchLoader>(*valid_set_, B, G, dp_rank, dp, c.model.vocab_size);
}

int64_t TrainData::train_tokens() const {
  int64_t n = 0;
  for (size_t d = 0; d < train_set_->num_datasets(); ++d) n += train_set_->dataset(d).num_tokens();
  return n;
}

int64_t TrainData::train_samples_per_epoch() const {
  int64_t n = 0;
  for (size_t d = 0; d < train_set_->num_datasets(); ++d) n += train_set_->dataset(d).num_samples_per_epoch();
  return n;
}

}  // namespace megatrain
