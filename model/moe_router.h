// The router of a Mixture-of-Experts layer (model/moe.h) for the N tokens of one micro-batch: which
// top_k experts each token goes to, with which combine weight, which assignments an expert's
// capacity drops, the load-balancing and z losses, and the backward of all of it to the router
// logits. Plain arrays, row-major, no communication (every tensor-parallel rank routes the same
// rows identically; expert parallelism moves tokens after routing).
//
// Definitions (N tokens t, E experts e, k = top_k; z_t = logits row t):
//   scores  s_t = softmax(z_t) (router = softmax) or sigmoid(z_t) elementwise (router = sigmoid).
//   choice  the k experts of the highest s_t,e + bias_e (bias: DeepSeek-V3 aux-free balancing,
//           selection only; nullptr = 0), in descending order, ties to the lower expert index.
//   gates   g_t,j = s_t,e_j / Σ_j' s_t,e_j' for k > 1 (Mixtral, DeepSeek-V3), s_t,e_1 for k = 1
//           (Switch); 0 for a dropped assignment (no renormalisation after dropping), and 0 where
//           the chosen scores all underflowed to 0 (instead of 0/0).
//   capacity C = ceil(capacity_factor · N · k / E) per expert (capacity_factor = 0: dropless), the
//           factor read as the decimal it stands for (1.1f · 10 / 11 gives 1, not 2). An
//           expert chosen by more than C tokens keeps C of them: drop = probs keeps those of the
//           highest s_t,e (ties to the lower token), drop = position the first C in token order.
//   aux     E / (N · k) · Σ_e c_e · P_e, c_e = tokens choosing e (before dropping),
//           P_e = (1/N) Σ_t p_t,e with p = s for softmax and p_t = s_t / Σ_e s_t,e for sigmoid
//           (Switch Transformer / GShard load balancing; c is a constant, P carries the gradient;
//           1 when choices and probabilities spread evenly over the experts, E at k = 1 when all
//           sit on one expert).
//   z       (1/N) Σ_t (logsumexp z_t)²   (ST-MoE router z-loss).
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace megatrain {

struct RouterSpec {
  int n_experts = 0, top_k = 1;
  RouterKind kind = RouterKind::softmax;
  float capacity_factor = 0.0f;  // 0 = dropless
  DropPolicy drop = DropPolicy::probs;
};
RouterSpec router_spec(const MoeConfig& moe);

// C for N tokens; N (every token fits) when dropless.
int64_t expert_capacity(const RouterSpec& spec, int64_t n_tokens);

// The aux loss's sums over a set of tokens: c_e, Σ_t p_t,e (double each, per expert) and N. Sums
// of several sets (context-parallel ranks' shares of the same sequences, model/moe.cpp) give the
// aux loss of their union.
struct RouterAuxSums {
  std::vector<double> counts, p_sums;
  double n_tokens = 0.0;
};
// What a forward measured: the two loss values, how many assignments capacity dropped, and the aux
// loss's sums over these tokens (aux is their loss; a cp group adds its ranks', model/moe.cpp).
struct RouterStats {
  double aux = 0.0, z = 0.0;
  int64_t dropped = 0;  // assignments dropped by capacity (of N · k)
  RouterAuxSums sums;
};
RouterAuxSums router_aux_sums(const RouterSpec& spec, int64_t n_tokens, const float* scores, const int32_t* expert);
double router_aux_loss(const RouterSpec& spec, const RouterAuxSums& sums);

// logits (N, E) → scores (N, E), expert (N, k), gates (N, k), kept (N, k: 1 kept, 0 dropped),
// tokens_per_expert (E: kept assignments). bias: (E) or nullptr. Returns the stats. Gates, choice,
// dropping and aux read the scores as stored (float), so router_backward is their exact derivative.
RouterStats router_forward(const RouterSpec& spec, int64_t n_tokens, const float* logits, const float* bias,
                           float* scores, int32_t* expert, float* gates, int32_t* kept,
                           int64_t* tokens_per_expert);

// dlogits (N, E) = ∂L/∂logits (overwritten), where L = Σ_t,j dgates_t,j · g_t,j + aux_grad · aux +
// z_grad · z: dgates (N, k) is the gradient of the combine weights (ignored where dropped),
// aux_grad and z_grad the loss coefficients times the loss scale (0 = the loss is off). With
// aux_totals the aux loss is that of a larger set of tokens these N are part of (its sums), and
// dlogits the gradient of these N tokens' share of it.
void router_backward(const RouterSpec& spec, int64_t n_tokens, const float* logits, const float* scores,
                     const int32_t* expert, const int32_t* kept, const float* dgates, float aux_grad, float z_grad,
                     float* dlogits, const RouterAuxSums* aux_totals = nullptr);

}  // namespace megatrain
