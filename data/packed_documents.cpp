#include "data/packed_documents.h"

namespace megatrain {

void find_document_starts(const int32_t* tokens, int T, int32_t eod, int32_t* starts) {
  int32_t start = 0;
  for (int t = 0; t < T; ++t) {
    starts[t] = start;
    if (tokens[t] == eod) start = t + 1;
  }
}

int64_t mask_eod_targets(const int32_t* tokens, int32_t* targets, int64_t n, int32_t eod, int32_t masked) {
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] == eod) targets[i] = masked;
    counted += targets[i] != masked;
  }
  return counted;
}

}  // namespace megatrain
