// Blended GPT datasets with cached sample indices (behaviour in dataset_builder.h).
// Invariant: a loaded index is used only after the same checks a built one satisfies by
// construction (blend_index_problem, gpt_sample_index_problem).
#include "data/dataset_builder.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <system_error>
#include <utility>

#include "data/sample_index_cache.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;

// "size S, modified T" of a file, or "missing".
std::string file_stamp(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return "missing";
  const auto mtime = fs::last_write_time(path, ec);
  return fmt::format("size {} mtime {}", size, ec ? 0 : mtime.time_since_epoch().count());
}

std::vector<double> part_weights(std::span<const BlendPart> parts) {
  std::vector<double> w;
  for (const BlendPart& p : parts) w.push_back(p.weight);
  return normalise_blend_weights(w);
}

// Each dataset's spec: its range and the number of its samples the blend reads.
std::vector<GptSampleSpec> dataset_specs(std::span<const BlendPart> parts, const SampleIndexOptions& o,
                                         const BlendIndex& blend) {
  const std::vector<int64_t> counts =
      parts.size() == 1 ? std::vector<int64_t>{o.num_samples} : blend_counts(blend, parts.size());
  std::vector<GptSampleSpec> specs;
  for (size_t d = 0; d < parts.size(); ++d) specs.push_back({parts[d].docs, o.seq_len, o.shuffle, o.seed, counts[d], o.pack});
  return specs;
}

// "" when a loaded set is exactly what building would give in shape and range.
std::string set_problem(const SampleIndexSet& set, std::span<const BlendPart> parts, const SampleIndexOptions& o) {
  if (set.datasets.size() != parts.size())
    return fmt::format("holds {} datasets instead of {}", set.datasets.size(), parts.size());
  if (parts.size() == 1) {
    if (!set.blend.dataset.empty() || !set.blend.sample.empty()) return "has a blend index for one dataset";
  } else if (std::string p = blend_index_problem(set.blend, parts.size(), o.num_samples); !p.empty()) {
    return "blend index: " + p;
  }
  const std::vector<GptSampleSpec> specs = dataset_specs(parts, o, set.blend);
  for (size_t d = 0; d < parts.size(); ++d)
    if (std::string p = gpt_sample_index_problem(set.datasets[d], *parts[d].dataset, specs[d]); !p.empty())
      return fmt::format("dataset {}: {}", d, p);
  return {};
}

SampleIndexSet build_set(std::span<const BlendPart> parts, const SampleIndexOptions& o,
                         const std::vector<double>& weights) {
  SampleIndexSet set;
  if (parts.size() > 1) set.blend = build_blend_index(weights, o.num_samples);
  const std::vector<GptSampleSpec> specs = dataset_specs(parts, o, set.blend);
  for (size_t d = 0; d < parts.size(); ++d) set.datasets.push_back(build_gpt_sample_index(*parts[d].dataset, specs[d]));
  return set;
}

}  // namespace

std::string sample_index_key(std::span<const BlendPart> parts, const SampleIndexOptions& o) {
  const std::vector<double> weights = part_weights(parts);
  std::string key = fmt::format("megatrain sample index v1\nseq_len {} seed {} shuffle {} samples {}\n", o.seq_len,
                                o.seed, o.shuffle, o.num_samples);
  if (!o.pack) key += "unpacked\n";  // only then, so that the keys of packed indices are those of before
  for (size_t d = 0; d < parts.size(); ++d) {
    const std::string prefix = fs::absolute(parts[d].dataset->prefix()).lexically_normal().string();
    key += fmt::format("dataset {} weight {:.17g} documents [{}, {}) prefix {}\n  idx {}\n  bin {}\n", d, weights[d],
                       parts[d].docs.begin, parts[d].docs.end, prefix, file_stamp(prefix + ".idx"),
                       file_stamp(prefix + ".bin"));
  }
  return key;
}

std::unique_ptr<BlendedDataset> build_blended_dataset(std::span<const BlendPart> parts, const SampleIndexOptions& o,
                                                      BuildReport& report) {
  const auto start = std::chrono::steady_clock::now();
  report = BuildReport{};
  const std::vector<double> weights = part_weights(parts);
  for (const BlendPart& p : parts) MT_CHECK(p.dataset, "blend part without a dataset");
  SampleIndexSet set;
  std::string key;
  if (o.use_cache) {
    key = sample_index_key(parts, o);
    const std::string dir = o.cache_dir.empty() ? parts[0].dataset->prefix() + ".megatrain-cache" : o.cache_dir;
    report.path = sample_index_cache_path(dir, key);
    std::string problem;
    const CacheRead read = read_sample_index_cache(report.path, key, set, problem);
    if (read == CacheRead::loaded) problem = set_problem(set, parts, o);
    report.loaded = read == CacheRead::loaded && problem.empty();
    if (!problem.empty())
      report.warnings.push_back(fmt::format("sample index cache {} {}; rebuilding it", report.path, problem));
  }
  if (!report.loaded) {
    set = build_set(parts, o, weights);
    if (o.use_cache && o.write_cache) {
      const std::string problem = write_sample_index_cache(report.path, key, set);
      report.saved = problem.empty();
      if (!report.saved)
        report.warnings.push_back(
            fmt::format("sample index cache not saved ({}); continuing with the index in memory — set "
                        "data.cache_dir to a writable folder to start faster next time",
                        problem));
    }
  }
  const std::vector<GptSampleSpec> specs = dataset_specs(parts, o, set.blend);
  std::vector<std::unique_ptr<GptDataset>> datasets;
  for (size_t d = 0; d < parts.size(); ++d) {
    datasets.push_back(std::make_unique<GptDataset>(*parts[d].dataset, specs[d], std::move(set.datasets[d])));
    if (const int64_t cut = datasets.back()->cut_documents(); cut > 0)
      report.warnings.push_back(fmt::format(
          "data.pack = false: {} of the {} documents of \"{}\" are longer than train.seq_len + 1 = {} tokens and "
          "only their first {} are read; preprocess with --max-tokens {} to refuse or cut them there",
          cut, parts[d].docs.size(), parts[d].dataset->prefix(), o.seq_len + 1, o.seq_len + 1, o.seq_len + 1));
  }
  auto blended = std::make_unique<BlendedDataset>(std::move(datasets), std::move(set.blend), o.num_samples);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return blended;
}

}  // namespace megatrain
