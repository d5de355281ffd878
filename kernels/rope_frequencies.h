// RoPE's rotation frequencies, with the context-extension rescalings of Hugging Face's
// rope_scaling (transformers' modeling_rope_utils): pair j < D/2 of a head at position t turns by
// the angle t · inv_freq(j), and the rotated pair is multiplied by `attention` (YaRN's attention
// factor; 1 for the others). With b_j = θ^(−2j/D), the unscaled frequency:
//   none     inv_freq = b_j
//   linear   inv_freq = b_j / factor                                (position interpolation)
//   llama3   wavelength λ = 2π / b_j: λ < L / high_freq_factor keeps b_j, λ > L / low_freq_factor
//            takes b_j / factor, between them s = (L / λ − low) / (high − low) blends
//            (1 − s) · b_j / factor + s · b_j, with L the original context
//   yarn     r_j = clamp((j − ramp_low) / (ramp_high − ramp_low), 0, 1) blends
//            r_j · b_j / factor + (1 − r_j) · b_j (ramp bounds from beta_fast / beta_slow, on the host)
// A plain struct that both backends compute with (MT_HOST_DEVICE), in double precision and rounded
// once to float, so the CPU and the GPU turn by the same float factors. model/config.h resolves it
// from a model's settings (rope_frequencies()).
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

namespace megatrain {

enum class RopeScaling : uint8_t { none, linear, llama3, yarn };

struct RopeFrequencies {
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::none;
  double factor = 1.0;                                   // linear, llama3, yarn
  double original_len = 0.0;                             // llama3: L
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double ramp_low = 0.0, ramp_high = 0.0;                // yarn, with ramp_high > ramp_low
  float attention = 1.0f;                                // yarn; 1 otherwise
};

MT_HOST_DEVICE inline double rope_inv_freq(const RopeFrequencies& f, int j, int D) {
  const double base = pow(f.theta, -2.0 * j / D);
  switch (f.scaling) {
    case RopeScaling::none:
      return base;
    case RopeScaling::linear:
      return base / f.factor;
    case RopeScaling::llama3: {
      const double wavelen = 2.0 * 3.14159265358979323846 / base;
      if (wavelen < f.original_len / f.high_freq_factor) return base;
      if (wavelen > f.original_len / f.low_freq_factor) return base / f.factor;
      const double s = (f.original_len / wavelen - f.low_freq_factor) / (f.high_freq_factor - f.low_freq_factor);
      return (1.0 - s) * base / f.factor + s * base;
    }
    case RopeScaling::yarn: {
      const double r = fmin(fmax((j - f.ramp_low) / (f.ramp_high - f.ramp_low), 0.0), 1.0);
      return r * base / f.factor + (1.0 - r) * base;
    }
  }
  return base;
}

}  // namespace megatrain
