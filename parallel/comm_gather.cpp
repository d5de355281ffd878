#include "parallel/comm_gather.h"

namespace megatrain {

std::vector<std::string> all_gather_text(const Comm& comm, const std::string& text) {
  const std::vector<int64_t> sizes = all_gather_value(comm, static_cast<int64_t>(text.size()));
  int64_t total = 0;
  for (const int64_t n : sizes) total += n;
  std::vector<uint8_t> all(static_cast<size_t>(total));
  comm.all_gather(all.data(), reinterpret_cast<const uint8_t*>(text.data()), sizes).wait();
  std::vector<std::string> out;
  const auto* at = reinterpret_cast<const char*>(all.data());
  for (const int64_t n : sizes) {
    out.emplace_back(at, static_cast<size_t>(n));
    at += n;
  }
  return out;
}

}  // namespace megatrain
