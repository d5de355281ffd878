// loss_scale_trace INITIAL MIN GROWTH BACKOFF INTERVAL HYSTERESIS FLAGS: runs DynamicLossScaler
// (trainer/loss_scaler.h) through FLAGS, one character per step ('1' = the step overflowed, '0' =
// clean), and prints the scale after each update, one per line, as a decimal that reads back
// exactly; at a collapse (the scaler throws) it prints "collapse" and stops. For
// megatron_loss_scale_reference.py, which runs Megatron-Core's DynamicGradScaler on the same steps.
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "kernels/check.h"
#include "trainer/loss_scaler.h"

int main(int argc, char** argv) {
  if (argc != 8) {
    fmt::print(stderr, "usage: loss_scale_trace INITIAL MIN GROWTH BACKOFF INTERVAL HYSTERESIS FLAGS\n");
    return 2;
  }
  megatrain::LossScaleOptions o;
  o.initial_scale = std::strtod(argv[1], nullptr);
  o.min_scale = std::strtod(argv[2], nullptr);
  o.growth_factor = std::strtod(argv[3], nullptr);
  o.backoff_factor = std::strtod(argv[4], nullptr);
  o.growth_interval = std::strtoll(argv[5], nullptr, 10);
  o.hysteresis = std::strtoll(argv[6], nullptr, 10);
  megatrain::DynamicLossScaler scaler(o);
  for (const char f : std::string(argv[7])) {
    try {
      scaler.update(f == '1');
    } catch (const megatrain::Error&) {
      fmt::print("collapse\n");
      return 0;
    }
    fmt::print("{}\n", scaler.scale());
  }
  return 0;
}
