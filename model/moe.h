// The Mixture-of-Experts sublayer of an MoE block, in place of the MLP (GShard / Switch / Mixtral):
//   y = x_mid + Dropout(Σ_j g_t,j · Expert_e_t,j(Norm(x_mid)_t))
// Norm output → router (model/moe_router.h: top-k experts e_t,j and gates g_t,j per token) →
// permute by expert → dispatch over the expert-parallel ranks (parallel/expert_dispatch.h) → each
// local expert's MLP on its rows (grouped GEMMs; the model's activation, no biases) → combine back
// → un-permute and weight by the gates. Backward runs the same path in reverse, and the router
// gets the gates' gradient plus those of the load-balancing and z losses. A dense MLP may run beside
// the experts: shared experts or residual MoE (model/moe_dense_branch.h).
//
// Tensor parallelism: the sublayer lives in the tp region like the MLP. Every tp rank routes the
// same full rows (the router weight is replicated, its gradient the same on every rank) and holds
// a slice of every expert's units (FC column-parallel, projection row-parallel), so an expert's
// output is a partial sum: the weighted combine is linear, so the sum over tp is taken once after
// it (all-reduce, or reduce-scatter with sequence parallelism), as the MLP's row-parallel output.
// The gates' gradient ⟨dy_t, expert output⟩ needs the whole output, so it is summed over tp.
//
// Memory is planned for the worst case: a rank sends at most N·k rows and receives at most
// ep·N·min(k, E/ep) (dropless), or ep·(E/ep)·C with capacity C per expert.
#pragma once
#include <vector>

#include "model/attention_core.h"
#include "model/moe_dense_branch.h"
#include "model/moe_router.h"
#include "model/sublayer.h"
#include "parallel/expert_dispatch.h"

namespace megatrain {

struct MoeWeights {
  NormWeights norm;
  Tensor router;       // (E, C)
  Tensor router_bias;  // (E) with moe.aux_free_bias > 0 (selection only; set by moe_update_bias), else empty
  Tensor fc;      // (El, Fl or 2·Fl, C): this rank's experts, its tp slice of their units
  Tensor proj;    // (El, C, Fl)
  DenseBranchWeights dense;  // shared experts or residual MoE (model/moe_dense_branch.h); else empty
};

// What one forward measured (for logging; the stage sums it over a step).
struct MoeForwardStats {
  RouterStats router;
  std::vector<int64_t> tokens;  // E: kept assignments per expert
};

struct MoeActivations {
  NormActivations norm;    // (Nl, C); with SP entered into the tp region in BlockScratch::gathered
  Tensor logits, scores;   // (N, E)
  Tensor expert, kept;     // (N, k) i32
  Tensor gates;            // (N, k)
  Tensor row;              // (N, k) i32: the assignment's row in send order, −1 when dropped
  Tensor grouped_in;       // (Rmax, C): the rows this rank's experts received, grouped by expert
  Tensor fc;               // (Rmax, Fl or 2·Fl)
  Tensor act;              // (Rmax, Fl)
  Tensor out_send;         // (N·k, C): expert outputs back in send order (partial over tp)
  DispatchCounts counts;
  MoeForwardStats stats;
  DenseBranchActivations dense;
  RouterAuxSums aux_totals;  // the aux loss's sums over the tokens of the whole sequences
};

// The router runs on the host (model/moe_router.h) on a device stage too: its inputs come down
// into these and the plan it makes goes back up (a CPU stage uses its activations in place and
// leaves these empty). N·E floats for the logits and scores, N·k for the rest.
struct MoeHostRouting {
  std::vector<float> logits, scores, gates, dgates, dlogits, bias;
  std::vector<int32_t> expert, kept, row;
};

// Buffers reused by every MoE block of a micro-batch step (not saved).
struct MoeScratch {
  Tensor send;        // (N·k, C)
  Tensor by_source;   // (Rmax, C)
  Tensor grouped;     // (Rmax, C)
  Tensor dfc, dact;   // (Rmax, Fl or 2·Fl), (Rmax, Fl)
  Tensor dgates;      // (N, k)
  Tensor dlogits;     // (N, E)
  Tensor dx;          // (N, C): the router's input gradient before it is added
  std::vector<int64_t> send_counts;  // E
  DenseBranchScratch dense;
  Tensor dy_experts;  // (N, C): the experts' share of the output gradient, with a dense branch
  MoeHostRouting host;
};

// How the MoE blocks of a stage run: the router, the token exchange, the losses' weights, and the
// scratch they share. loss_grad: ∂(global loss)/∂(this micro-batch's aux or z loss) per unit
// coefficient (the trainer's loss scale over the micro-batches of a step; backward only).
struct MoeRuntime {
  RouterSpec spec;
  const ExpertDispatch* dispatch = nullptr;
  float aux_coef = 0.0f, z_coef = 0.0f, loss_grad = 0.0f;
  MoeScratch* scratch = nullptr;
  double* dispatch_ms = nullptr;  // when set, the time spent moving tokens is added to it
  // The stage's attention core (model/attention_core.h): the ranks that hold the rest of each
  // sequence. The aux loss is the whole sequences' (its sums added over them; every such rank then
  // has the same value and adds its own tokens' share of the gradient); capacity stays per rank
  // (Megatron's too).
  const AttentionCore* sequence = nullptr;
};

// DeepSeek-V3's auxiliary-loss-free balancing, after an update: every expert's selection bias moves
// by `rate` towards balance, b_e += rate · sign(mean load − load_e), the loads being the step's
// kept assignments per expert over the whole batch (every rank computes the same values).
void moe_update_bias(float* bias, const int64_t* load, int n_experts, float rate);

// Rows a rank may receive for its experts (see the top of this file), for N tokens per rank.
int64_t moe_max_received(const ModelConfig& cfg, int ep, int64_t n_tokens);
MoeActivations moe_activations(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int ep, int64_t rows);
MoeScratch moe_scratch(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int ep, int64_t rows);

// out = x_mid + Dropout(MoE(Norm(x_mid))); fills a.stats.
void moe_sublayer_forward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, const MoeRuntime& moe,
                          Tensor out, MoeActivations& a, BlockScratch& sc, Tensor x_mid, const MoeWeights& w,
                          const DropoutSite& drop);
// dmid = gradient at x_mid (residual included) from dout; `+=` into grad.
void moe_sublayer_backward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, const MoeRuntime& moe,
                           Tensor dmid, const MoeWeights& grad, Tensor dout, const MoeActivations& a,
                           BlockScratch& sc, Tensor x_mid, const MoeWeights& w, const DropoutSite& drop);

}  // namespace megatrain
