// The parts a ZeRO state is made of, and make_zero_parts: the ZeRO stage as a choice of parts, made
// once here — the only place outside the plan's sizes that looks at the stage. A parameter store
// (replicated, partitioned or sharded; 16 bits, qwZ and hpZ as its codecs), a gradient store (full,
// scattered or pooled), a reducer (all-reduce or reduce-scatter, in float32, bf16, qgZ or a
// compressor's form) and the deferred-reduction queue of bounded staleness.
#pragma once
#include <functional>
#include <memory>

#include "optim/grad_store.h"
#include "optim/param_store.h"
#include "optim/reducer.h"
#include "optim/staleness.h"

namespace megatrain {

struct ZeroParts {
  std::unique_ptr<ParamStore> params;
  std::unique_ptr<GradStore> grads;
  std::unique_ptr<Reducer> reducer;
  DeferredReductions stale;
};

// complete(b): the ZeRO state's completion of bucket b's reduction (the pooled gradient store
// recycles a buffer through it).
ZeroParts make_zero_parts(const ZeroPlan& plan, const Comm& dp, std::function<void(int)> complete);

}  // namespace megatrain
