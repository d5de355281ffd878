// Bytes of any length between two ranks: the length (int64), then the bytes, on one tag. For the
// memory snapshots a rank hands its buddy and a recovering rank receives (trainer/memory_*.h).
#pragma once
#include <cstdint>
#include <string>

#include "parallel/comm.h"

namespace megatrain {

inline void send_text(const Comm& comm, const std::string& text, int peer, int tag) {
  const auto n = static_cast<int64_t>(text.size());
  comm.send(&n, 1, peer, tag).wait();
  comm.send(reinterpret_cast<const uint8_t*>(text.data()), n, peer, tag).wait();
}

// Into `text`, whose capacity is reused.
inline void recv_text(const Comm& comm, std::string& text, int peer, int tag) {
  int64_t n = 0;
  comm.recv(&n, 1, peer, tag).wait();
  text.resize(static_cast<size_t>(n));
  comm.recv(reinterpret_cast<uint8_t*>(text.data()), n, peer, tag).wait();
}

// `text` to rank `to` while receiving from rank `from` into `in`: both directions in flight at once,
// so a ring of ranks each sending to the next cannot deadlock.
inline void exchange_text(const Comm& comm, const std::string& text, int to, int from, std::string& in, int tag) {
  const auto n = static_cast<int64_t>(text.size());
  int64_t m = 0;
  Work send_n = comm.send(&n, 1, to, tag);
  comm.recv(&m, 1, from, tag).wait();
  send_n.wait();
  in.resize(static_cast<size_t>(m));
  Work send_b = comm.send(reinterpret_cast<const uint8_t*>(text.data()), n, to, tag);
  comm.recv(reinterpret_cast<uint8_t*>(in.data()), m, from, tag).wait();
  send_b.wait();
}

}  // namespace megatrain
