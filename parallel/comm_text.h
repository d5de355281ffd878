// Bytes of any length between two ranks: the length (int64), then the bytes, on one tag. For the
// memory snapshots a recovering rank receives (trainer/memory_recovery.h); a snapshot's copy to its
// buddy goes straight into a mapped file instead (MemorySnapshots::exchange).
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

}  // namespace megatrain
