#include "health/fault_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>

#include "health/fault_random.h"
#include "kernels/check.h"
#include "parallel/launch_env.h"

namespace megatrain {
namespace {

struct KindSpec {
  FaultKind kind;
  const char* name;
  std::set<std::string> required, optional;
};

const std::vector<KindSpec>& kinds() {
  static const std::vector<KindSpec> k = {
      {FaultKind::slow, "slow", {"rank", "ms"}, {"from_step", "to_step", "every", "attempt"}},
      {FaultKind::kill, "kill", {"rank", "step"}, {"sig", "attempt"}},
      {FaultKind::hang, "hang", {"rank", "step"}, {"how", "attempt"}},
      {FaultKind::exc, "exc", {"rank", "step"}, {"extra_collective", "attempt"}},
      {FaultKind::nan, "nan", {"rank", "step"}, {"where", "element", "attempt"}},
      {FaultKind::spike, "spike", {"rank", "step", "factor"}, {"attempt"}},
      {FaultKind::bitflip, "bitflip", {"rank", "step", "tensor"}, {"attempt"}},
      {FaultKind::ckpt_crash, "ckpt_crash", {"rank", "step", "phase"}, {"attempt"}},
      {FaultKind::ckpt_slow, "ckpt_slow", {"ms"}, {"rank", "attempt"}},
      {FaultKind::selfcheck_slow, "selfcheck_slow", {"rank", "factor"}, {"attempt"}},
      {FaultKind::peak_slow, "peak_slow", {"ms"}, {"rank", "attempt"}},
  };
  return k;
}

[[noreturn]] void bad(const std::string& spec, const std::string& why) {
  throw InputError(fmt::format(
      "MEGATRAIN_FAULT = \"{}\": {}; expected KIND:key=value:…[;KIND:…] with KIND one of slow, kill, hang, exc, nan, "
      "spike, bitflip, ckpt_crash, ckpt_slow, selfcheck_slow, peak_slow, random (health/fault_plan.h lists each "
      "kind's keys)",
      spec, why));
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (size_t next; (next = s.find(sep, pos)) != std::string::npos; pos = next + 1) out.push_back(s.substr(pos, next - pos));
  out.push_back(s.substr(pos));
  return out;
}

int64_t integer(const std::string& spec, const std::string& key, const std::string& text) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size()) bad(spec, fmt::format("{} = \"{}\" is not an integer", key, text));
  return v;
}

void one_of(const std::string& spec, const std::string& key, const std::string& v, std::initializer_list<const char*> ok) {
  if (std::none_of(ok.begin(), ok.end(), [&](const char* o) { return v == o; }))
    bad(spec, fmt::format("{} = \"{}\" is not one of {}", key, v, fmt::join(ok, ", ")));
}

Fault parse_one(const std::string& spec, const std::string& item) {
  const std::vector<std::string> parts = split(item, ':');
  const auto kind = std::find_if(kinds().begin(), kinds().end(), [&](const KindSpec& k) { return parts[0] == k.name; });
  if (kind == kinds().end()) bad(spec, fmt::format("unknown kind \"{}\"", parts[0]));
  std::map<std::string, std::string> kv;
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    if (eq == std::string::npos) bad(spec, fmt::format("\"{}\" is not key=value", parts[i]));
    const std::string key = parts[i].substr(0, eq);
    if (!kind->required.contains(key) && !kind->optional.contains(key))
      bad(spec, fmt::format("{} takes the keys {}{}{}, not \"{}\"", kind->name, fmt::join(kind->required, ", "),
                            kind->optional.empty() ? "" : " and optionally ", fmt::join(kind->optional, ", "), key));
    if (!kv.emplace(key, parts[i].substr(eq + 1)).second) bad(spec, fmt::format("{} is given twice", key));
  }
  for (const std::string& key : kind->required)
    if (!kv.contains(key)) bad(spec, fmt::format("{} needs {}", kind->name, key));
  Fault f;
  f.kind = kind->kind;
  if (auto r = kv.find("rank"); r != kv.end() && r->second != "*") {
    f.rank = static_cast<int>(integer(spec, "rank", r->second));
    if (f.rank < 0) bad(spec, "rank must be ≥ 0 or *");
  }
  if (auto s = kv.find("step"); s != kv.end()) {
    const size_t dots = s->second.find("..");
    f.first_step = integer(spec, "step", s->second.substr(0, dots));
    f.last_step = dots == std::string::npos ? f.first_step : integer(spec, "step", s->second.substr(dots + 2));
    const int64_t lowest = f.kind == FaultKind::hang ? 0 : 1;
    if (f.first_step < lowest || f.last_step < f.first_step)
      bad(spec, fmt::format("step = \"{}\" must be S or A..B with {} ≤ A ≤ B", s->second, lowest));
  }
  if (f.kind == FaultKind::ckpt_slow || f.kind == FaultKind::selfcheck_slow ||
      f.kind == FaultKind::peak_slow)  // no step key: every step
    f.first_step = std::numeric_limits<int64_t>::min();
  if (kv.contains("from_step")) f.first_step = integer(spec, "from_step", kv["from_step"]);
  if (kv.contains("to_step")) f.last_step = integer(spec, "to_step", kv["to_step"]);
  if (f.kind == FaultKind::slow && (f.first_step < 1 || f.last_step < f.first_step))
    bad(spec, "slow needs 1 ≤ from_step ≤ to_step");
  if (kv.contains("every")) {
    f.every = integer(spec, "every", kv["every"]);
    if (f.every < 1) bad(spec, "every must be ≥ 1 (a sleep every that many steps)");
  }
  if (auto a = kv.find("attempt"); a != kv.end() && a->second != "*") {
    f.attempt = static_cast<int>(integer(spec, "attempt", a->second));
    if (f.attempt < 1) bad(spec, "attempt must be ≥ 1 or *");
  } else if (a != kv.end()) {
    f.attempt = -1;
  }
  if (kv.contains("ms")) {
    f.ms = integer(spec, "ms", kv["ms"]);
    if (f.ms < 0) bad(spec, "ms must be ≥ 0");
  }
  if (f.kind == FaultKind::spike && f.rank >= 0) bad(spec, "spike acts on every rank's loss: give rank=*");
  if (kv.contains("factor")) {
    f.factor = static_cast<int>(integer(spec, "factor", kv["factor"]));
    if (f.factor < 1) bad(spec, "factor must be ≥ 1");
  }
  if (kv.contains("sig")) {
    f.sig = static_cast<int>(integer(spec, "sig", kv["sig"]));
    if (f.sig < 1 || f.sig > 64) bad(spec, "sig must be a signal number in 1 … 64");
  }
  if (f.kind == FaultKind::hang) {
    f.detail = kv.contains("how") ? kv["how"] : "sigstop";
    one_of(spec, "how", f.detail, {"sigstop", "spin", "sleep", "freeze"});
  } else if (f.kind == FaultKind::nan) {
    f.detail = kv.contains("where") ? kv["where"] : "grad";
    one_of(spec, "where", f.detail, {"grad", "loss"});
    if (kv.contains("element")) {
      f.element = kv["element"];
      one_of(spec, "element", f.element, {"first", "middle", "last"});
      if (f.detail != "grad") bad(spec, "element places one NaN among the gradients: it needs where=grad");
    }
  } else if (f.kind == FaultKind::bitflip) {
    f.detail = kv["tensor"];
  } else if (f.kind == FaultKind::exc && kv.contains("extra_collective")) {
    one_of(spec, "extra_collective", kv["extra_collective"], {"0", "1"});
    if (kv["extra_collective"] == "1") f.detail = "extra_collective";
  } else if (f.kind == FaultKind::ckpt_crash) {
    f.detail = kv["phase"];
    one_of(spec, "phase", f.detail, {"mid_shard_write", "after_shard_before_commit", "after_commit_before_latest"});
  }
  return f;
}

// random:seed=S:mtti_s=T:kinds=…[:attempt=N|*]; nullptr when it does not act in `attempt`.
std::unique_ptr<RandomFaults> parse_random(const std::string& spec, const std::string& item, int attempt) {
  RandomFaultSpec r;
  int only = -1;
  std::set<std::string> given;
  for (const std::string& part : split(item, ':')) {
    if (part == "random") continue;
    const size_t eq = part.find('=');
    if (eq == std::string::npos) bad(spec, fmt::format("\"{}\" is not key=value", part));
    const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
    if (!given.insert(key).second) bad(spec, fmt::format("{} is given twice", key));
    if (key == "seed") {
      r.seed = static_cast<uint64_t>(integer(spec, key, value));
    } else if (key == "mtti_s") {
      size_t used = 0;
      try {
        r.mtti_s = std::stod(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != value.size() || !(r.mtti_s > 0.0)) bad(spec, "mtti_s must be a positive number of seconds");
    } else if (key == "kinds") {
      for (const std::string& k : split(value, ',')) {
        const auto it = std::find_if(kinds().begin(), kinds().end(), [&](const KindSpec& s) { return k == s.name; });
        if (it == kinds().end() || it->kind == FaultKind::ckpt_slow || it->kind == FaultKind::selfcheck_slow ||
            it->kind == FaultKind::peak_slow || it->kind == FaultKind::bitflip || it->kind == FaultKind::spike)
          bad(spec, fmt::format("random kinds are kill, hang, exc, nan, slow and ckpt_crash, not \"{}\"", k));
        r.kinds.push_back(it->kind);
      }
    } else if (key == "attempt") {
      only = value == "*" ? -1 : static_cast<int>(integer(spec, key, value));
    } else {
      bad(spec, fmt::format("random takes the keys seed, mtti_s, kinds and optionally attempt, not \"{}\"", key));
    }
  }
  if (!given.contains("seed") || !given.contains("mtti_s") || r.kinds.empty())
    bad(spec, "random needs seed, mtti_s and kinds");
  if (only >= 0 && only != attempt) return nullptr;
  return std::make_unique<RandomFaults>(r, attempt);
}

}  // namespace

FaultPlan::FaultPlan(std::deque<Fault> faults, std::unique_ptr<RandomFaults> random)
    : faults_(std::move(faults)), random_(std::move(random)) {}

FaultPlan::~FaultPlan() = default;

FaultPlan FaultPlan::parse(const std::string& spec, int attempt) {
  std::deque<Fault> faults;
  std::unique_ptr<RandomFaults> random;
  for (const std::string& item : split(spec, ';')) {
    if (item.empty()) continue;
    if (item.starts_with("random:") || item == "random") {
      if (random) bad(spec, "random is given twice");
      random = parse_random(spec, item, attempt);
      continue;
    }
    const Fault f = parse_one(spec, item);
    if (f.attempt < 0 || f.attempt == attempt) faults.push_back(f);
  }
  return FaultPlan(std::move(faults), std::move(random));
}

void FaultPlan::arm_random(int64_t step, int world) {
  if (!random_) return;
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (!armed_) armed_since_ = now, armed_ = true;
  for (Fault& f : random_->due(std::chrono::duration<double>(now - armed_since_).count(), step, world))
    faults_.push_back(std::move(f));
}

FaultPlan& FaultPlan::from_environment() {
  static FaultPlan plan = [] {
    const int attempt = int_from_env("MEGATRAIN_ATTEMPT", 1, 1);  // set by scripts/megatrain-resilient
    const char* v = std::getenv("MEGATRAIN_FAULT");
    return parse(v ? v : "", attempt);
  }();
  return plan;
}

const Fault* FaultPlan::find(FaultKind kind, int rank, int64_t step) const {
  std::lock_guard lock(mu_);
  for (const Fault& f : faults_)
    if (f.kind == kind && f.on(rank, step)) return &f;
  return nullptr;
}

const char* fault_kind_name(FaultKind k) {
  for (const KindSpec& s : kinds())
    if (s.kind == k) return s.name;
  return "?";
}

void log_injection(const Fault& f, int rank, int64_t step, const std::string& detail) {
  const double wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::fprintf(stderr, "FAULT_INJECTED kind=%s rank=%d step=%lld%s%s t_wall=%.3f\n", fault_kind_name(f.kind), rank,
               static_cast<long long>(step), detail.empty() ? "" : " ", detail.c_str(), wall);
  std::fflush(stderr);
}

}  // namespace megatrain
