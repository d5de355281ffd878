#include "checkpoint/memory_snapshot.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cstring>

#include "kernels/check.h"

namespace megatrain {
namespace {

constexpr std::string_view kMagic = "MTSNAP01";

uint32_t crc_of(std::string_view bytes) {
  uLong c = crc32(0L, Z_NULL, 0);
  for (size_t at = 0; at < bytes.size();) {
    const size_t n = std::min<size_t>(bytes.size() - at, 1u << 30);
    c = crc32(c, reinterpret_cast<const Bytef*>(bytes.data() + at), static_cast<uInt>(n));
    at += n;
  }
  return static_cast<uint32_t>(c);
}

template <class T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
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

}  // namespace

std::string encode_snapshot(const CheckpointTensors& t, const SnapshotHeader& h) {
  std::string out;
  encode_snapshot_body(t, h, out);
  seal_snapshot(out);
  return out;
}

void seal_snapshot(std::string& body) { put(body, crc_of(body)); }

void encode_snapshot_body(const CheckpointTensors& t, const SnapshotHeader& h, std::string& out) {
  size_t floats = 0;
  for (const CheckpointPiece& p : t.pieces)
    for (const FlatSlice* f : {&p.params, &p.exp_avg, &p.exp_avg_sq}) floats += static_cast<size_t>(f->end - f->begin);
  out.reserve(kMagic.size() + 256 + h.layout_json.size() + t.pieces.size() * 72 + floats * sizeof(float));
  out.assign(kMagic);
  put(out, static_cast<int32_t>(h.rank)), put(out, static_cast<int32_t>(h.world));
  put(out, static_cast<int64_t>(h.layout_json.size()));
  out += h.layout_json;
  const TrainState& s = h.state;
  put(out, s.step), put(out, s.consumed_samples), put(out, s.seed), put(out, s.skipped_steps), put(out, s.loss_scale);
  put(out, s.loss_scale_growth_tracker), put(out, s.loss_scale_hysteresis_tracker);
  put(out, static_cast<int64_t>(t.pieces.size()));
  for (const CheckpointPiece& p : t.pieces) {
    put(out, p.begin), put(out, p.part_begin), put(out, p.part_end);
    for (const FlatSlice* f : {&p.params, &p.exp_avg, &p.exp_avg_sq}) {
      put(out, f->begin), put(out, f->end);
      out.append(reinterpret_cast<const char*>(f->data), static_cast<size_t>(f->end - f->begin) * sizeof(float));
    }
  }
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

SnapshotHeader restore_snapshot(std::string_view bytes, const CheckpointTensors& t, const std::string& source) {
  const SnapshotHeader h = snapshot_header(bytes, source);
  Reader r(bytes.substr(0, bytes.size() - sizeof(uint32_t)), source);
  read_header(r);
  const auto pieces = r.get<int64_t>();
  if (pieces != static_cast<int64_t>(t.pieces.size()))
    throw CheckpointError(fmt::format("{}: snapshot holds {} pieces, this rank {} (another layout)", source, pieces,
                                      t.pieces.size()));
  for (const CheckpointPiece& p : t.pieces) {
    const auto begin = r.get<int64_t>(), part_begin = r.get<int64_t>(), part_end = r.get<int64_t>();
    if (begin != p.begin || part_begin != p.part_begin || part_end != p.part_end)
      throw CheckpointError(fmt::format("{}: snapshot piece at {} partition [{}, {}) where this rank holds {} [{}, {}) "
                                        "(another layout)",
                                        source, begin, part_begin, part_end, p.begin, p.part_begin, p.part_end));
    for (const FlatSlice* f : {&p.params, &p.exp_avg, &p.exp_avg_sq}) {
      const auto b = r.get<int64_t>(), e = r.get<int64_t>();
      if (b != f->begin || e != f->end)
        throw CheckpointError(fmt::format("{}: snapshot slice [{}, {}) where this rank holds [{}, {}) (another layout)",
                                          source, b, e, f->begin, f->end));
      const size_t n = static_cast<size_t>(e - b) * sizeof(float);
      if (n > 0) std::memcpy(f->data, r.take(n), n);
    }
  }
  return h;
}

}  // namespace megatrain
