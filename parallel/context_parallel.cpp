#include "parallel/context_parallel.h"

#include <algorithm>
#include <cstring>

#include "kernels/check.h"

namespace megatrain {

void CpSplit::take_local(const int32_t* full, int32_t* local, int B) const {
  const int c = chunk(), Tl = local_len();
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < 2; ++k)
      std::memcpy(local + static_cast<int64_t>(b) * Tl + k * c, full + static_cast<int64_t>(b) * seq_len + chunk_of(k) * c,
                  sizeof(int32_t) * static_cast<size_t>(c));
}

void for_each_position_run(const CpSplit& split, int64_t first_row, int64_t rows,
                           const std::function<void(int64_t, int64_t, int)>& f) {
  MT_CHECK(split.cp >= 1 && split.seq_len % (2 * split.cp) == 0 && first_row >= 0 && rows >= 0,
           "context-parallel split: seq_len {} over cp {} (needs a multiple of 2·cp), rows [{}, +{})", split.seq_len,
           split.cp, first_row, rows);
  const int64_t c = split.chunk();
  for (int64_t i = 0; i < rows;) {
    const int64_t t = (first_row + i) % split.local_len();
    const int64_t n = std::min(rows - i, c - t % c);
    f(i, n, split.position(static_cast<int>(t)));
    i += n;
  }
}

}  // namespace megatrain
