#include "trainer/metrics.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/check.h"
#include "model/stage.h"

namespace megatrain {

void metrics_file_keep_through(const std::string& path, int64_t step, std::string_view key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  std::ostringstream all;
  all << in.rdbuf();
  const std::string text = all.str();
  std::string kept;
  int64_t line_no = 0, dropped = 0;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = text.find('\n', begin);
    ++line_no;
    if (end == std::string::npos) {
      spdlog::warn("{}:{}: dropped an unfinished last line (the previous run stopped while writing it)", path,
                   line_no);
      break;
    }
    const std::string_view line(text.data() + begin, end - begin);
    const auto row = nlohmann::json::parse(line, nullptr, false);
    MT_INPUT_CHECK(row.is_object() && row.contains("step") && row["step"].is_number_integer(),
                   "{}:{}: not a metrics row (a JSON object with an integer \"step\"); {} must be "
                   "written only by megatrain: move the file away or set {} to a new path",
                   path, line_no, key, key);
    if (row["step"].get<int64_t>() <= step)
      kept.append(line).push_back('\n');
    else
      ++dropped;
    begin = end + 1;
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << kept;
    MT_INPUT_CHECK(out.good(), "{} = \"{}\": cannot write {}; check the folder's permissions", key, path, tmp);
  }
  std::filesystem::rename(tmp, path);
  if (dropped > 0) spdlog::info("{}: dropped {} rows after step {} (they are redone now)", path, dropped, step);
}

StepRowsFile::StepRowsFile(std::string path, std::string key, int64_t resumed_step)
    : path_(std::move(path)), key_(std::move(key)) {
  if (path_.empty()) return;
  if (resumed_step > 0) metrics_file_keep_through(path_, resumed_step, key_);
  file_.open(path_, std::ios::out | (resumed_step > 0 ? std::ios::app : std::ios::trunc));
  MT_INPUT_CHECK(file_.good(), "{} = \"{}\": cannot open for writing; check that the folder exists", key_, path_);
}

void StepRowsFile::write(const std::string& row) {
  file_ << row << '\n';
  file_.flush();
}

void StepRowsFile::rewind(int64_t step) {
  if (!file_.is_open()) return;
  file_.close();
  metrics_file_keep_through(path_, step, key_);
  file_.open(path_, std::ios::out | std::ios::app);
  MT_INPUT_CHECK(file_.good(), "{} = \"{}\": cannot reopen for writing", key_, path_);
}

MetricsLog::MetricsLog(const std::string& path, bool enabled, int64_t resumed_step)
    : rows_(enabled ? path : "", "log.metrics_file", resumed_step), enabled_(enabled) {}

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::vector<MoeLayerMetrics> moe_metrics(const std::vector<MoeLayerStats>& stats, int64_t steps) {
  std::vector<MoeLayerMetrics> out;
  for (const MoeLayerStats& s : stats) {
    MoeLayerMetrics m{s.layer};
    const auto [lo, hi] = std::minmax_element(s.tokens.begin(), s.tokens.end());
    double sum = 0.0;
    for (int64_t t : s.tokens) sum += static_cast<double>(t);
    const auto per_step = [&](double v) { return v / static_cast<double>(std::max<int64_t>(steps, 1)); };
    m.tokens_min = per_step(static_cast<double>(*lo));
    m.tokens_max = per_step(static_cast<double>(*hi));
    m.tokens_mean = per_step(sum / static_cast<double>(s.tokens.size()));
    m.dropped_fraction = s.assignments > 0 ? static_cast<double>(s.dropped) / static_cast<double>(s.assignments) : 0.0;
    const auto mean = [&](double v) { return s.micro_batches > 0 ? v / static_cast<double>(s.micro_batches) : 0.0; };
    m.aux_loss = mean(s.aux);
    m.z_loss = mean(s.z);
    out.push_back(m);
  }
  return out;
}

namespace {

// "41.2% of measured bf16 GEMM 105.3 GFLOP/s"; capped: "100% (capped: above measured … GFLOP/s)".
std::string mfu_text(const MfuReading& r) {
  const std::string peak = r.peak_tflops >= 1.0 ? fmt::format("{:.4g} TFLOP/s", r.peak_tflops)
                                                : fmt::format("{:.4g} GFLOP/s", r.peak_tflops * 1e3);
  if (r.exceeded) return fmt::format("100% (capped: above {} {})", r.source, peak);
  return fmt::format("{:.1f}% of {} {}", r.mfu * 100.0, r.source, peak);
}

}  // namespace

void MetricsLog::step(const StepMetrics& m) {
  if (!enabled_) return;
  const std::string mfu = m.mfu ? mfu_text(*m.mfu) : "n/a";
  const std::string pp = m.pp_idle_ms.size() > 1 ? fmt::format(" | pp idle {:.1f} ms", fmt::join(m.pp_idle_ms, "/"))
                                                  : std::string();
  const std::string scale =
      m.loss_scale ? fmt::format(" | scale {:g} ({} skipped)", *m.loss_scale, m.skipped_steps) : std::string();
  fmt::print("step {:>6}/{} | loss {:.4f} | lr {:.3e} | gnorm {:.3f}{} | {:>8.0f} tok/s | {:>8.1f} ms | comm {:.1f} ms "
             "({:.1f} exposed){} | MFU {} | ETA {}\n",
             m.step, m.steps, m.loss, m.lr, m.grad_norm, scale, m.tokens_per_s, m.step_time_ms, m.comm_ms,
             m.exposed_comm_ms, pp, mfu, format_duration(m.eta_s));
  if (!m.moe.empty())
    fmt::print("  moe dispatch {:.1f} ms | ep comm {:.1f} ms ({:.1f} exposed)\n", m.moe_dispatch_ms, m.ep_comm_ms,
               m.ep_exposed_ms);
  if (m.cp_comm_ms > 0.0) fmt::print("  cp comm {:.1f} ms ({:.1f} exposed)\n", m.cp_comm_ms, m.cp_exposed_ms);
  for (const MoeLayerMetrics& e : m.moe)
    fmt::print("  moe layer {:>3} | tokens/expert min {:.1f} mean {:.1f} max {:.1f} | dropped {:.2f}% | aux {:.4f} | "
               "z {:.4f}\n",
               e.layer, e.tokens_min, e.tokens_mean, e.tokens_max, e.dropped_fraction * 100.0, e.aux_loss, e.z_loss);
  std::fflush(stdout);
  if (!rows_.is_open()) return;
  nlohmann::json j = {{"step", m.step},          {"loss", m.loss},
                      {"lr", m.lr},              {"grad_norm", m.grad_norm},
                      {"tokens_per_s", m.tokens_per_s}, {"step_time_ms", m.step_time_ms},
                      {"iter_time_ms", m.iter_time_ms},
                      {"comm_ms", m.comm_ms},    {"exposed_comm_ms", m.exposed_comm_ms},
                      {"comm_bytes", m.comm_bytes}, {"hpz_comm_bytes", m.hpz_comm_bytes},
                      {"compute_ms", m.compute_ms},
                      {"tp_comm_ms", m.tp_comm_ms}, {"tp_exposed_ms", m.tp_exposed_ms},
                      {"ep_comm_ms", m.ep_comm_ms}, {"ep_exposed_ms", m.ep_exposed_ms},
                      {"moe_dispatch_ms", m.moe_dispatch_ms},
                      {"cp_comm_ms", m.cp_comm_ms}, {"cp_exposed_ms", m.cp_exposed_ms},
                      {"pp_comm_ms", m.pp_comm_ms}, {"pp_idle_ms", m.pp_idle_ms}};
  const MemoryMetrics& b = m.memory;
  j["memory_bytes"] = {{"params", b.params},           {"master_params", b.master_params}, {"grads", b.grads},
                       {"optimizer", b.optimizer},     {"activations", b.activations},
                       {"comm_buffers", b.comm_buffers}, {"gemm_scratch", b.gemm_scratch},
                       {"peak_rss", b.peak_rss},       {"device_peak", b.device_peak}};
  j["mfu"] = m.mfu ? nlohmann::json(m.mfu->mfu) : nlohmann::json(nullptr);
  j["mfu_peak"] = m.mfu ? nlohmann::json{{"tflops", m.mfu->peak_tflops}, {"source", m.mfu->source},
                                         {"exceeded", m.mfu->exceeded}}
                        : nlohmann::json(nullptr);
  j["precision"] = m.precision;
  j["world"] = m.world;
  j["loss_scale"] = m.loss_scale ? nlohmann::json(*m.loss_scale) : nlohmann::json(nullptr);
  j["skipped_steps"] = m.skipped_steps;
  j["global_batch_size"] = m.global_batch_size;
  j["consumed_samples"] = m.consumed_samples;
  if (!m.moe.empty()) {
    j["moe"] = nlohmann::json::array();
    for (const MoeLayerMetrics& e : m.moe)
      j["moe"].push_back({{"layer", e.layer},
                          {"tokens_per_expert", {{"min", e.tokens_min}, {"mean", e.tokens_mean}, {"max", e.tokens_max}}},
                          {"dropped_fraction", e.dropped_fraction},
                          {"aux_loss", e.aux_loss},
                          {"z_loss", e.z_loss}});
  }
  rows_.write(j.dump());
}

void MetricsLog::validation(int64_t step, double val_loss) {
  if (!enabled_) return;
  fmt::print("step {:>6} | val_loss {:.4f}\n", step, val_loss);
  std::fflush(stdout);
  if (!rows_.is_open()) return;
  rows_.write(nlohmann::json{{"step", step}, {"val_loss", val_loss}}.dump());
}

void MetricsLog::memory(int64_t step, const MemoryMetrics& m) {
  if (!enabled_) return;
  constexpr double MiB = 1 << 20;
  fmt::print("memory per rank at step {}: params {:.2f} MiB | master params {:.2f} MiB | grads {:.2f} MiB | optimizer "
             "{:.2f} MiB | activations {:.2f} MiB | comm buffers {:.2f} MiB | GEMM scratch {:.2f} MiB | peak RSS {:.0f} "
             "MiB\n",
             step, static_cast<double>(m.params) / MiB, static_cast<double>(m.master_params) / MiB,
             static_cast<double>(m.grads) / MiB,
             static_cast<double>(m.optimizer) / MiB, static_cast<double>(m.activations) / MiB,
             static_cast<double>(m.comm_buffers) / MiB,
             static_cast<double>(m.gemm_scratch) / MiB, static_cast<double>(m.peak_rss) / MiB);
  if (m.device_peak > 0) fmt::print("device memory peak {:.2f} MiB\n", static_cast<double>(m.device_peak) / MiB);
  std::fflush(stdout);
}

}  // namespace megatrain
