// Activation recompute (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
// Models", 2022; Megatron-LM's --recompute-granularity): trade backward compute for activation
// memory. selective keeps no attention core output per micro-batch and recomputes it from the saved
// QKV in backward; full keeps only the input of whole blocks and reruns their forward in backward.
#pragma once

namespace megatrain {

enum class Recompute { none, selective, full };

}  // namespace megatrain
