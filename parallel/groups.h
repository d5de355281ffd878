// Process groups as values: the rank layout (a pure function, testable without MPI) and
// ProcessGroups, the communicators built from it once and passed by reference — no singletons.
//
// Layout (Megatron-Core RankGenerator order tp → cp → dp → pp, tp varying fastest):
//
//   rank = tp + TP·(cp + CP·(dp + DP·pp))        world = TP·CP·DP·PP
//
// so tensor-parallel peers are adjacent ranks (one node, fastest links) and pipeline stages are
// the slowest-varying coordinate. Invariant: rank_coords and rank_of are inverse bijections
// between [0, world) and the coordinate box, and every GroupKind partitions [0, world).
//
// Expert parallelism lies inside data parallelism (Megatron-Core's expert-model-parallel-size):
// EP divides DP and the data-parallel coordinate splits as dp = ep + EP·edp, ep fastest, so the
// same ranks read as tp → cp → ep → edp → pp. The EP ranks of an ep group are consecutive members
// of one dp group and hold different experts (an MoE layer exchanges tokens among them); the
// DP/EP ranks of an edp group hold the same experts and reduce their gradients. Dense parameters
// are replicated over, and reduced across, the whole dp group. Until the MoE work ep was an axis
// of its own (world = TP·CP·EP·DP·PP); it was folded in because Megatron users expect
// dp = world / (tp·cp·pp) whatever ep is, and dense parameters are replicated over every
// data-parallel rank anyway, so a separate axis only renamed part of dp.
#pragma once
#include <array>
#include <string_view>
#include <vector>

#include "parallel/comm.h"

namespace megatrain {

// ep is not a factor of the world: it divides dp (see above).
struct ParallelDims {
  int tp = 1, cp = 1, ep = 1, dp = 1, pp = 1;
  int world() const { return tp * cp * dp * pp; }
  bool operator==(const ParallelDims&) const = default;
};

// A rank's position on each axis; coordinate x lies in [0, dims.x), and edp in [0, dims.dp / dims.ep).
// ep and edp restate dp: ep = dp % dims.ep, edp = dp / dims.ep.
struct RankCoords {
  int tp = 0, cp = 0, ep = 0, edp = 0, dp = 0, pp = 0;
  bool operator==(const RankCoords&) const = default;
};

// Which ranks a group holds, for a rank r with coordinates c:
//   tp, cp, ep, edp, dp, pp — the ranks whose coordinates equal c on every axis except that one,
//                        dp standing for the pair (ep, edp); sizes dims.tp, dims.cp, dims.ep,
//                        dims.dp / dims.ep, dims.dp, dims.pp. E.g. the dp group is r's
//                        data-parallel replicas (dense gradients), the edp group the replicas of
//                        r's experts (expert gradients), the pp group its stages, in stage order;
//   model              — every rank with the same dp coordinate as r (size world / dp): the ranks
//                        that together hold one full replica of the dense model (tp·cp·pp of them);
//   dp_cp              — the ranks with r's tp and pp coordinates (size cp·dp): the ranks holding the
//                        same dense parameters, over which their gradients are reduced and ZeRO
//                        shards them (context-parallel ranks are data-parallel for the weights:
//                        Megatron-Core's data-parallel group with context parallelism). dp when cp = 1;
//   edp_cp             — the same for experts: the ranks with r's tp, ep and pp coordinates (size
//                        cp·dp/ep), which hold the same experts. edp when cp = 1.
// Every group lists its ranks in increasing order, which is also their rank inside the group's
// communicator.
enum class GroupKind { tp, cp, ep, edp, dp, pp, model, dp_cp, edp_cp };
inline constexpr std::array<GroupKind, 9> kGroupKinds = {GroupKind::tp,    GroupKind::cp,    GroupKind::ep,
                                                         GroupKind::edp,   GroupKind::dp,    GroupKind::pp,
                                                         GroupKind::model, GroupKind::dp_cp, GroupKind::edp_cp};
std::string_view group_kind_name(GroupKind kind);

// Coordinates of `rank` (requires 0 <= rank < dims.world()).
RankCoords rank_coords(const ParallelDims& dims, int rank);
// The rank at coordinates `c` (requires every coordinate in range, ep and edp agreeing with dp).
int rank_of(const ParallelDims& dims, const RankCoords& c);
// The ranks of `rank`'s group of the given kind, ascending.
std::vector<int> group_ranks(const ParallelDims& dims, int rank, GroupKind kind);
// A number identifying `rank`'s group of the given kind: equal for exactly the ranks of one group,
// in [0, world). Used as the split color.
int group_index(const ParallelDims& dims, int rank, GroupKind kind);

// The arguments of the split that makes `rank`'s group of the given kind from the world: color
// group_index (≥ 0, as ncclCommSplit requires), key the world rank. MPI_Comm_split and
// ncclCommSplit both order a color's members by key, so either split yields group_ranks in order;
// ProcessGroups passes these to Comm::split, which the NCCL backend forwards to both.
struct SplitKey {
  int color = 0, key = 0;
  bool operator==(const SplitKey&) const = default;
};
SplitKey group_split(const ParallelDims& dims, int rank, GroupKind kind);

// Checks a user's parallel sizes against the world size; dp = 0 means world / (tp·cp·pp).
// Throws InputError naming the sizes when one is < 1 (dp < 0), the world is not divisible, the
// product differs from the world size, or ep does not divide dp.
ParallelDims resolve_dims(int world, int tp, int cp, int ep, int pp, int dp);

// One communicator per GroupKind for this rank, made by splitting `world` (collective: every rank
// of `world` must construct ProcessGroups with the same dims, at the same point).
class ProcessGroups {
 public:
  ProcessGroups(const Comm& world, const ParallelDims& dims);

  const ParallelDims& dims() const { return dims_; }
  const RankCoords& coords() const { return coords_; }
  const Comm& world() const { return world_; }
  const Comm& tp() const { return get(GroupKind::tp); }
  const Comm& cp() const { return get(GroupKind::cp); }
  const Comm& ep() const { return get(GroupKind::ep); }
  const Comm& edp() const { return get(GroupKind::edp); }
  const Comm& dp() const { return get(GroupKind::dp); }
  const Comm& pp() const { return get(GroupKind::pp); }
  const Comm& model() const { return get(GroupKind::model); }
  const Comm& dp_cp() const { return get(GroupKind::dp_cp); }
  const Comm& edp_cp() const { return get(GroupKind::edp_cp); }
  const Comm& get(GroupKind kind) const { return groups_[static_cast<size_t>(kind)]; }

 private:
  ParallelDims dims_;
  RankCoords coords_;
  Comm world_;
  std::vector<Comm> groups_;  // indexed by GroupKind
};

}  // namespace megatrain
