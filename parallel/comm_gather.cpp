#include "parallel/comm_gather.h"

namespace megatrain {

std::vector<std::string> all_gather_text(const Comm& comm, const std::string& text) {
  constexpr size_t kWidth = 256;
  const auto p = static_cast<size_t>(comm.size());
  std::string slot = text.substr(0, kWidth - 1);
  slot.resize(kWidth, '\0');
  std::vector<uint8_t> all(p * kWidth);
  comm.all_gather(all.data(), reinterpret_cast<const uint8_t*>(slot.data()),
                  std::vector<int64_t>(p, static_cast<int64_t>(kWidth)))
      .wait();
  std::vector<std::string> out;
  for (size_t r = 0; r < p; ++r) out.emplace_back(reinterpret_cast<const char*>(all.data() + r * kWidth));
  return out;
}

}  // namespace megatrain
