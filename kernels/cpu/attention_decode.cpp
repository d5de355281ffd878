// Causal attention of a few new query rows over a KV cache, for incremental decoding on CPU.
// Query row i sits at position pos0 + i and attends to cache rows 0 … pos0 + i (the cache already
// holds the keys and values of the new rows). One task per (row, head): scores, a max-subtracted
// softmax and the weighted sum of values, each summed in a fixed order, so results do not depend on
// the thread count. Grouped-query: head h reads kv head h / (H / Hkv), as attention_forward.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/vec.h"

namespace megatrain::cpu {

void attention_decode_forward(float* out, const float* q, const float* k_cache, const float* v_cache, int n,
                              int pos0, const AttnDims& d) {
  const int group = d.H / d.Hkv;
  const int64_t q_row = static_cast<int64_t>(d.H) * d.D, kv_row = static_cast<int64_t>(d.Hkv) * d.D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
#pragma omp parallel
  {
    std::vector<float> s(static_cast<size_t>(pos0 + n));
#pragma omp for collapse(2) schedule(static)
    for (int i = 0; i < n; ++i)
      for (int h = 0; h < d.H; ++h) {
        const float* qi = q + i * q_row + static_cast<int64_t>(h) * d.D;
        const int64_t head_off = static_cast<int64_t>(h / group) * d.D;
        const int len = pos0 + i + 1;
        float mx = -INFINITY;
        for (int j = 0; j < len; ++j) {
          const float* kj = k_cache + j * kv_row + head_off;
          float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
          for (int c = 0; c < d.D; ++c) acc += qi[c] * kj[c];
          s[static_cast<size_t>(j)] = acc * scale;
          mx = std::max(mx, acc * scale);
        }
        float sum = 0.0f;
        for (int j = 0; j < len; ++j) sum += (s[static_cast<size_t>(j)] = fast_exp(s[static_cast<size_t>(j)] - mx));
        const float inv = 1.0f / sum;
        float* o = out + i * q_row + static_cast<int64_t>(h) * d.D;
        std::fill(o, o + d.D, 0.0f);
        for (int j = 0; j < len; ++j) {
          const float p = s[static_cast<size_t>(j)] * inv;
          const float* vj = v_cache + j * kv_row + head_off;
#pragma omp simd
          for (int c = 0; c < d.D; ++c) o[c] += p * vj[c];
        }
      }
  }
}

}  // namespace megatrain::cpu
