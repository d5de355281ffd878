// One device per local rank (see device_select.h).
#include "parallel/device_select.h"

#include "kernels/check.h"

namespace megatrain {

int device_for_local_rank(int local_rank, int local_size, int device_count) {
  MT_INPUT_CHECK(local_rank >= 0 && local_rank < local_size,
                 "local rank {} is outside the node's {} rank(s) (check the launcher's local rank and size variables)",
                 local_rank, local_size);
  MT_INPUT_CHECK(device_count > 0,
                 "local rank {} needs a CUDA device but this process sees none (check nvidia-smi, the driver, and "
                 "CUDA_VISIBLE_DEVICES)",
                 local_rank);
  MT_INPUT_CHECK(local_size <= device_count,
                 "{} ranks run on this node but this process sees {} CUDA device(s), one per rank is needed: launch "
                 "at most {} rank(s) per node (mpirun --map-by ppr:{}:node, srun --ntasks-per-node={}), or make more "
                 "devices visible (CUDA_VISIBLE_DEVICES)",
                 local_size, device_count, device_count, device_count, device_count);
  return local_rank;
}

}  // namespace megatrain
