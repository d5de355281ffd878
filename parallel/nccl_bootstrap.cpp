// Rank 0 makes the id, one broadcast of a status byte and the id hands it to the group (see
// nccl_bootstrap.h).
#include "parallel/nccl_bootstrap.h"

#include <algorithm>
#include <exception>

namespace megatrain {

NcclUniqueIdBytes nccl_bootstrap_unique_id(const Comm& group, const std::function<NcclUniqueIdBytes()>& make_id) {
  // message[0]: 1 when rank 0 made the id; message[1..]: the id.
  std::array<uint8_t, 1 + kNcclUniqueIdBytes> message{};
  std::exception_ptr failure;
  if (group.rank() == 0) {
    try {
      const NcclUniqueIdBytes id = make_id();
      message[0] = 1;
      std::copy(id.begin(), id.end(), message.begin() + 1);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  group.broadcast(message.data(), static_cast<int64_t>(message.size()), 0).wait();
  if (failure) std::rethrow_exception(failure);
  if (message[0] != 1)
    throw CommError(fmt::format("rank {} group '{}': NCCL unique id bootstrap failed: the group's rank 0 could not "
                                "create the id (its error says why)",
                                group.rank(), group.name()));
  NcclUniqueIdBytes id{};
  std::copy(message.begin() + 1, message.end(), id.begin());
  return id;
}

}  // namespace megatrain
