#include "checkpoint/memory_snapshot.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "checkpoint/crc32.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

constexpr std::string_view kMagic = "MTSNAP01";

uint32_t crc_of(std::string_view bytes) { return crc32_update(0, bytes.data(), bytes.size()); }

// Where encode() puts a snapshot's bytes: counted (Count: the size), or copied to a cursor (Copy).
struct Count {
  size_t n = 0;
  void bytes(const void*, size_t k) { n += k; }
};
// Copy also takes the CRC-32 of what it wrote a block at a time, while the block is still in cache:
// one pass over the state's memory instead of a copy and then a read of the copy.
struct Copy {
  static constexpr size_t kBlock = 256 << 10;
  char* at;
  uint32_t crc = 0;
  void bytes(const void* p, size_t k) {
    for (size_t done = 0; done < k; done += kBlock) {
      const size_t n = std::min(kBlock, k - done);
      std::memcpy(at, static_cast<const char*>(p) + done, n);
      crc = crc32_update(crc, at, n);
      at += n;
    }
  }
};

template <class Sink, class T>
void put(Sink& out, const T& v) {
  out.bytes(&v, sizeof v);
}

// Everything of the snapshot but the CRC-32, in the format's order (checkpoint/memory_snapshot.h).
template <class Sink>
void encode(const CheckpointTensors& t, const SnapshotHeader& h, Sink& out) {
  out.bytes(kMagic.data(), kMagic.size());
  put(out, static_cast<int32_t>(h.rank)), put(out, static_cast<int32_t>(h.world));
  put(out, static_cast<int64_t>(h.layout_json.size()));
  out.bytes(h.layout_json.data(), h.layout_json.size());
  const TrainState& s = h.state;
  put(out, s.step), put(out, s.consumed_samples), put(out, s.seed), put(out, s.skipped_steps), put(out, s.loss_scale);
  put(out, s.loss_scale_growth_tracker), put(out, s.loss_scale_hysteresis_tracker);
  put(out, static_cast<int64_t>(t.pieces.size()));
  for (const CheckpointPiece& p : t.pieces) {
    put(out, p.begin), put(out, p.part_begin), put(out, p.part_end);
    for (const FlatSlice* f : {&p.params, &p.exp_avg, &p.exp_avg_sq}) {
      MT_CHECK(f->begin <= p.part_begin && p.part_end <= f->end, "slice [{}, {}) lacks its partition [{}, {})",
               f->begin, f->end, p.part_begin, p.part_end);
      put(out, p.part_begin), put(out, p.part_end);
      out.bytes(f->data + (p.part_begin - f->begin), static_cast<size_t>(p.part_end - p.part_begin) * sizeof(float));
    }
  }
}

// Reads the fields of a snapshot in order; running past the end is a CheckpointError.
class Reader {
 public:
  Reader(std::string_view bytes, const std::string& source) : b_(bytes), source_(source) {}
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  const char* take(size_t n) {
    if (n > b_.size() - at_) throw CheckpointError(fmt::format("{}: snapshot ends early (truncated)", source_));
    const char* p = b_.data() + at_;
    at_ += n;
    return p;
  }

 private:
  std::string_view b_;
  const std::string& source_;
  size_t at_ = 0;
};

SnapshotHeader read_header(Reader& r) {
  SnapshotHeader h;
  r.take(kMagic.size());
  h.rank = r.get<int32_t>(), h.world = r.get<int32_t>();
  const auto n = r.get<int64_t>();
  h.layout_json.assign(r.take(static_cast<size_t>(n)), static_cast<size_t>(n));
  TrainState& s = h.state;
  s.step = r.get<int64_t>(), s.consumed_samples = r.get<int64_t>(), s.seed = r.get<uint64_t>();
  s.skipped_steps = r.get<int64_t>(), s.loss_scale = r.get<double>();
  s.loss_scale_growth_tracker = r.get<int64_t>(), s.loss_scale_hysteresis_tracker = r.get<int64_t>();
  return h;
}

constexpr size_t kKinds = 3;
constexpr const char* kKindNames[kKinds] = {"parameters", "first moments", "second moments"};

const FlatSlice& slice_of(const CheckpointPiece& p, size_t kind) {
  return kind == 0 ? p.params : kind == 1 ? p.exp_avg : p.exp_avg_sq;
}

// A slice as the snapshot stores it: flat elements [begin, end), their floats at `data` (unaligned).
struct StoredSlice {
  int64_t begin = 0, end = 0;
  const char* data = nullptr;
};
struct StoredPiece {
  int64_t begin = 0, part_begin = 0, part_end = 0;
  std::array<StoredSlice, kKinds> slices;
};
struct ParsedSnapshot {
  SnapshotHeader header;
  std::vector<StoredPiece> pieces;
};

// `bytes` checked whole (snapshot_header) and read into its pieces, which point into `bytes`.
ParsedSnapshot parse_snapshot(std::string_view bytes, const std::string& source) {
  ParsedSnapshot out{snapshot_header(bytes, source), {}};
  Reader r(bytes.substr(0, bytes.size() - sizeof(uint32_t)), source);
  read_header(r);
  const auto pieces = r.get<int64_t>();
  if (pieces < 0 || pieces > 1 << 20)
    throw CheckpointError(fmt::format("{}: snapshot holds {} pieces", source, pieces));
  for (int64_t k = 0; k < pieces; ++k) {
    StoredPiece& p = out.pieces.emplace_back();
    p.begin = r.get<int64_t>(), p.part_begin = r.get<int64_t>(), p.part_end = r.get<int64_t>();
    for (StoredSlice& f : p.slices) {
      f.begin = r.get<int64_t>(), f.end = r.get<int64_t>();
      if (f.end < f.begin) throw CheckpointError(fmt::format("{}: snapshot slice [{}, {})", source, f.begin, f.end));
      f.data = r.take(static_cast<size_t>(f.end - f.begin) * sizeof(float));
    }
  }
  return out;
}

// Sorted, disjoint [begin, end) ranges of flat elements.
using Ranges = std::vector<std::pair<int64_t, int64_t>>;

// Copies into `to` the elements of `from` that `filled` lacks, and adds them to it.
void fill(const FlatSlice& to, const StoredSlice& from, Ranges& filled) {
  const int64_t a = std::max(to.begin, from.begin), b = std::min(to.end, from.end);
  if (a >= b) return;
  const auto copy = [&](int64_t x, int64_t y) {
    std::memcpy(to.data + (x - to.begin), from.data + (x - from.begin) * static_cast<int64_t>(sizeof(float)),
                static_cast<size_t>(y - x) * sizeof(float));
  };
  int64_t at = a;
  for (const auto& [x, y] : filled) {
    if (y <= at) continue;
    if (x >= b) break;
    if (x > at) copy(at, x);
    at = std::max(at, y);
    if (at >= b) break;
  }
  if (at < b) copy(at, b);
  filled.emplace_back(a, b);
  std::sort(filled.begin(), filled.end());
  Ranges merged;
  for (const auto& r : filled)
    if (!merged.empty() && r.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  filled = std::move(merged);
}

std::string describe(const Ranges& ranges) {
  if (ranges.empty()) return "none of it";
  std::string out;
  for (const auto& [a, b] : ranges) out += fmt::format("{}[{}, {})", out.empty() ? "" : " ", a, b);
  return out;
}

}  // namespace

std::string encode_snapshot(const CheckpointTensors& t, const SnapshotHeader& h) {
  std::string out(snapshot_size(t, h), '\0');
  encode_snapshot_into(t, h, out.data());
  return out;
}

size_t snapshot_size(const CheckpointTensors& t, const SnapshotHeader& h) {
  Count count;
  encode(t, h, count);
  return count.n + sizeof(uint32_t);
}

void encode_snapshot_into(const CheckpointTensors& t, const SnapshotHeader& h, char* out) {
  Copy copy{out};
  encode(t, h, copy);
  std::memcpy(copy.at, &copy.crc, sizeof copy.crc);
}

SnapshotHeader snapshot_header(std::string_view bytes, const std::string& source) {
  if (bytes.size() < kMagic.size() + sizeof(uint32_t) || bytes.substr(0, kMagic.size()) != kMagic)
    throw CheckpointError(fmt::format("{}: not a megatrain memory snapshot (no {} header)", source, kMagic));
  uint32_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - sizeof stored, sizeof stored);
  const std::string_view body = bytes.substr(0, bytes.size() - sizeof stored);
  if (crc_of(body) != stored)
    throw CheckpointError(
        fmt::format("{}: snapshot damaged (CRC-32 {:08x}, stored {:08x})", source, crc_of(body), stored));
  Reader r(body, source);
  return read_header(r);
}

SnapshotHeader restore_snapshots(const std::vector<std::string>& snapshots, const CheckpointTensors& t,
                                 const std::string& source, const std::vector<bool>& experts_too) {
  MT_CHECK(experts_too.empty() || experts_too.size() == snapshots.size(),
           "restore_snapshots: {} experts_too flags for {} snapshots", experts_too.size(), snapshots.size());
  MT_CHECK(!snapshots.empty(), "restore_snapshots: no snapshots for {}", source);
  std::vector<ParsedSnapshot> parsed;
  for (size_t i = 0; i < snapshots.size(); ++i) {
    const std::string which = fmt::format("{} (snapshot {} of {})", source, i + 1, snapshots.size());
    parsed.push_back(parse_snapshot(snapshots[i], which));
    const TrainState &a = parsed.front().header.state, &b = parsed.back().header.state;
    if (a.step != b.step || a.consumed_samples != b.consumed_samples)
      throw CheckpointError(
          fmt::format("{}: snapshots of steps {} and {} cannot make one state", source, a.step, b.step));
  }
  for (const CheckpointPiece& p : t.pieces)
    for (size_t kind = 0; kind < kKinds; ++kind) {
      const FlatSlice& to = slice_of(p, kind);
      Ranges filled;
      for (size_t i = 0; i < parsed.size(); ++i)
        for (const StoredPiece& q : parsed[i].pieces)
          if (q.begin == p.begin && (p.begin == 0 || experts_too.empty() || experts_too[i]))
            fill(to, q.slices[kind], filled);
      if (to.end > to.begin && (filled.size() != 1 || filled[0] != std::pair{to.begin, to.end}))
        throw CheckpointError(fmt::format("{}: the snapshots do not hold every element of [{}, {}) of this rank's {}; "
                                          "they hold {}",
                                          source, to.begin, to.end, kKindNames[kind], describe(filled)));
    }
  return parsed.front().header;
}

}  // namespace megatrain
