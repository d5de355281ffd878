// Weighted blending of datasets (contract in blended_dataset.h): Megatron-Core's greedy rule,
// evaluated with the same float64 products and comparisons, so the choices are Megatron's.
#include "data/blended_dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "kernels/check.h"

namespace megatrain {

std::vector<double> normalise_blend_weights(std::span<const double> weights) {
  MT_DATA_CHECK(!weights.empty() && weights.size() <= std::numeric_limits<uint16_t>::max(),
                 "a blend needs 1 to {} datasets, got {}", std::numeric_limits<uint16_t>::max(), weights.size());
  double sum = 0.0;
  for (double w : weights) {
    MT_DATA_CHECK(std::isfinite(w) && w > 0.0, "blend weight {} must be a finite number > 0", w);
    sum += w;
  }
  std::vector<double> out(weights.begin(), weights.end());
  for (double& w : out) w /= sum;
  return out;
}

BlendIndex build_blend_index(std::span<const double> weights, int64_t num_samples) {
  MT_CHECK(!weights.empty() && weights.size() <= std::numeric_limits<uint16_t>::max() && num_samples >= 0,
           "{} weights, {} samples", weights.size(), num_samples);
  BlendIndex x;
  x.dataset.resize(static_cast<size_t>(num_samples));
  x.sample.resize(static_cast<size_t>(num_samples));
  std::vector<int64_t> count(weights.size(), 0);
  for (int64_t i = 0; i < num_samples; ++i) {
    const auto target = static_cast<double>(std::max<int64_t>(i, 1));
    size_t best = 0;
    double best_error = weights[0] * target - static_cast<double>(count[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      const double error = weights[d] * target - static_cast<double>(count[d]);
      if (error > best_error) best = d, best_error = error;
    }
    x.dataset[static_cast<size_t>(i)] = static_cast<uint16_t>(best);
    x.sample[static_cast<size_t>(i)] = count[best]++;
  }
  return x;
}

std::string blend_index_problem(const BlendIndex& x, size_t num_datasets, int64_t num_samples) {
  if (x.dataset.size() != static_cast<size_t>(num_samples) || x.sample.size() != static_cast<size_t>(num_samples))
    return fmt::format("{} entries instead of {}", x.dataset.size(), num_samples);
  std::vector<int64_t> next(num_datasets, 0);
  for (size_t i = 0; i < x.dataset.size(); ++i) {
    const size_t d = x.dataset[i];
    if (d >= num_datasets) return fmt::format("sample {} names dataset {} of {}", i, d, num_datasets);
    if (x.sample[i] != next[d]++) return fmt::format("sample {} is not dataset {}'s next sample", i, d);
  }
  return {};
}

std::vector<int64_t> blend_counts(const BlendIndex& x, size_t num_datasets) {
  std::vector<int64_t> count(num_datasets, 0);
  for (uint16_t d : x.dataset) ++count[d];
  return count;
}

BlendedDataset::BlendedDataset(std::vector<std::unique_ptr<GptDataset>> datasets, BlendIndex index, int64_t num_samples)
    : datasets_(std::move(datasets)), index_(std::move(index)), num_samples_(num_samples) {
  MT_CHECK(!datasets_.empty(), "a blend needs a dataset");
  for (const auto& d : datasets_) MT_CHECK(d->seq_len() == seq_len(), "blended datasets differ in seq_len");
  if (datasets_.size() == 1) {
    MT_CHECK(index_.dataset.empty() && datasets_[0]->num_samples() >= num_samples, "one dataset takes no blend index");
    return;
  }
  MT_CHECK(blend_index_problem(index_, datasets_.size(), num_samples).empty(), "inconsistent blend index");
  const std::vector<int64_t> count = blend_counts(index_, datasets_.size());
  for (size_t d = 0; d < datasets_.size(); ++d)
    MT_CHECK(datasets_[d]->num_samples() >= count[d], "dataset {} indexes {} samples, the blend needs {}", d,
             datasets_[d]->num_samples(), count[d]);
}

BlendedDataset::Source BlendedDataset::source(int64_t i) const {
  MT_CHECK(i >= 0 && i < num_samples_, "sample {} outside the {} samples of the blend", i, num_samples_);
  if (datasets_.size() == 1) return {0, i};
  return {index_.dataset[static_cast<size_t>(i)], index_.sample[static_cast<size_t>(i)]};
}

std::string BlendedDataset::describe(int64_t i, int t) const {
  const Source s = source(i);
  return datasets_[static_cast<size_t>(s.dataset)]->describe(s.sample, t);
}

void BlendedDataset::read_sample(int64_t i, int32_t* tokens, uint8_t* learned) const {
  const Source s = source(i);
  datasets_[static_cast<size_t>(s.dataset)]->read_sample(s.sample, tokens, learned);
}

bool BlendedDataset::has_loss_mask() const {
  return std::any_of(datasets_.begin(), datasets_.end(), [](const auto& d) { return d->has_loss_mask(); });
}

}  // namespace megatrain
