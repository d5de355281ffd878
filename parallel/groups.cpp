// Rank layout tp → cp → dp → pp (tp fastest), dp split as ep → edp, and the communicators built
// from it; the layout and each group's membership are documented in groups.h. Invariant:
// rank_of(rank_coords(r)) == r and group_index is equal exactly for ranks of the same group.
#include "parallel/groups.h"

#include <fmt/format.h>

#include "kernels/check.h"

namespace megatrain {
namespace {

int axis_size(const ParallelDims& d, GroupKind kind) {
  switch (kind) {
    case GroupKind::tp: return d.tp;
    case GroupKind::cp: return d.cp;
    case GroupKind::ep: return d.ep;
    case GroupKind::edp: return d.dp / d.ep;
    case GroupKind::dp: return d.dp;
    case GroupKind::pp: return d.pp;
    case GroupKind::model:
    case GroupKind::dp_cp:
    case GroupKind::edp_cp: break;
  }
  throw Error("axis_size: GroupKind::model, dp_cp and edp_cp are not single axes");
}

// Moves `c` to coordinate i on the axis of a per-axis GroupKind, keeping dp = ep + EP·edp.
void set_axis(RankCoords& c, const ParallelDims& d, GroupKind kind, int i) {
  switch (kind) {
    case GroupKind::tp: c.tp = i; return;
    case GroupKind::cp: c.cp = i; return;
    case GroupKind::ep: c.ep = i, c.dp = c.ep + d.ep * c.edp; return;
    case GroupKind::edp: c.edp = i, c.dp = c.ep + d.ep * c.edp; return;
    case GroupKind::dp: c.dp = i, c.ep = i % d.ep, c.edp = i / d.ep; return;
    case GroupKind::pp: c.pp = i; return;
    case GroupKind::model:
    case GroupKind::dp_cp:
    case GroupKind::edp_cp: break;
  }
  throw Error("set_axis: GroupKind::model, dp_cp and edp_cp are not single axes");
}

void check_dims(const ParallelDims& d) {
  MT_CHECK(d.tp >= 1 && d.cp >= 1 && d.ep >= 1 && d.dp >= 1 && d.pp >= 1 && d.dp % d.ep == 0,
           "parallel sizes must be >= 1 with ep dividing dp, got tp={} cp={} ep={} dp={} pp={}", d.tp, d.cp, d.ep,
           d.dp, d.pp);
}

}  // namespace

std::string_view group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::tp: return "tp";
    case GroupKind::cp: return "cp";
    case GroupKind::ep: return "ep";
    case GroupKind::edp: return "edp";
    case GroupKind::dp: return "dp";
    case GroupKind::pp: return "pp";
    case GroupKind::model: return "model";
    case GroupKind::dp_cp: return "dp_cp";
    case GroupKind::edp_cp: return "edp_cp";
  }
  return "?";
}

RankCoords rank_coords(const ParallelDims& d, int rank) {
  check_dims(d);
  MT_CHECK(rank >= 0 && rank < d.world(), "rank {} outside world of {}", rank, d.world());
  RankCoords c;
  c.tp = rank % d.tp;
  rank /= d.tp;
  c.cp = rank % d.cp;
  rank /= d.cp;
  set_axis(c, d, GroupKind::dp, rank % d.dp);
  c.pp = rank / d.dp;
  return c;
}

int rank_of(const ParallelDims& d, const RankCoords& c) {
  check_dims(d);
  MT_CHECK(c.tp >= 0 && c.tp < d.tp && c.cp >= 0 && c.cp < d.cp && c.dp >= 0 && c.dp < d.dp && c.pp >= 0 &&
               c.pp < d.pp && c.ep == c.dp % d.ep && c.edp == c.dp / d.ep,
           "coordinates tp={} cp={} ep={} edp={} dp={} pp={} outside dims tp={} cp={} ep={} dp={} pp={} (or ep, edp "
           "not dp % ep, dp / ep)",
           c.tp, c.cp, c.ep, c.edp, c.dp, c.pp, d.tp, d.cp, d.ep, d.dp, d.pp);
  return c.tp + d.tp * (c.cp + d.cp * (c.dp + d.dp * c.pp));
}

int group_index(const ParallelDims& d, int rank, GroupKind kind) {
  RankCoords c = rank_coords(d, rank);
  if (kind == GroupKind::model) return c.dp;
  if (kind == GroupKind::dp_cp) return rank_of(d, {.tp = c.tp, .pp = c.pp});
  if (kind == GroupKind::edp_cp) return rank_of(d, {.tp = c.tp, .ep = c.ep, .dp = c.ep, .pp = c.pp});
  set_axis(c, d, kind, 0);  // the group's first rank names it
  return rank_of(d, c);
}

SplitKey group_split(const ParallelDims& d, int rank, GroupKind kind) {
  return SplitKey{.color = group_index(d, rank, kind), .key = rank};
}

std::vector<int> group_ranks(const ParallelDims& d, int rank, GroupKind kind) {
  std::vector<int> ranks;
  if (kind == GroupKind::model) {
    const int dp = rank_coords(d, rank).dp;
    ranks.reserve(static_cast<size_t>(d.world() / d.dp));
    for (int r = 0; r < d.world(); ++r)
      if (rank_coords(d, r).dp == dp) ranks.push_back(r);
    return ranks;
  }
  if (kind == GroupKind::dp_cp || kind == GroupKind::edp_cp) {
    const RankCoords me = rank_coords(d, rank);
    for (int r = 0; r < d.world(); ++r) {
      const RankCoords c = rank_coords(d, r);
      if (c.tp == me.tp && c.pp == me.pp && (kind == GroupKind::dp_cp || c.ep == me.ep)) ranks.push_back(r);
    }
    return ranks;
  }
  RankCoords c = rank_coords(d, rank);
  const int n = axis_size(d, kind);
  ranks.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {  // rank_of increases with every coordinate, so ranks ascend
    set_axis(c, d, kind, i);
    ranks.push_back(rank_of(d, c));
  }
  return ranks;
}

ParallelDims resolve_dims(int world, int tp, int cp, int ep, int pp, int dp) {
  const std::string given =
      fmt::format("parallel.tp={} parallel.cp={} parallel.ep={} parallel.pp={} parallel.dp={} (world size {})", tp, cp,
                  ep, pp, dp, world);
  MT_INPUT_CHECK(world >= 1, "parallel layout {}: the world size must be >= 1", given);
  MT_INPUT_CHECK(tp >= 1 && cp >= 1 && ep >= 1 && pp >= 1 && dp >= 0,
                 "parallel layout {}: tp, cp, ep and pp must be >= 1 and dp >= 1 (or 0 to derive it)", given);
  const long long model = static_cast<long long>(tp) * cp * pp;
  if (dp == 0) {
    MT_INPUT_CHECK(world % model == 0,
                   "parallel layout {}: world size {} is not divisible by tp*cp*pp = {}; launch a multiple "
                   "of {} ranks or change the sizes",
                   given, world, model, model);
    dp = static_cast<int>(world / model);
  } else {
    MT_INPUT_CHECK(model * dp == world,
                   "parallel layout {}: tp*cp*pp*dp = {} but the world has {} ranks; set parallel.dp = 0 to "
                   "derive it or launch {} ranks",
                   given, model * dp, world, model * dp);
  }
  MT_INPUT_CHECK(dp % ep == 0,
                 "parallel layout {}: parallel.ep = {} does not divide the data-parallel size parallel.dp = {} "
                 "(experts are split over ep ranks inside each data-parallel group); pick ep from the divisors of "
                 "dp, or make dp a multiple of ep (the world a multiple of tp*cp*pp*ep = {} ranks)",
                 given, ep, dp, model * ep);
  return ParallelDims{.tp = tp, .cp = cp, .ep = ep, .dp = dp, .pp = pp};
}

ProcessGroups::ProcessGroups(const Comm& world, const ParallelDims& dims)
    : dims_(dims), world_(world) {
  MT_INPUT_CHECK(dims.world() == world.size(),
                 "parallel layout tp={} cp={} ep={} dp={} pp={} needs {} ranks but the world has {}", dims.tp,
                 dims.cp, dims.ep, dims.dp, dims.pp, dims.world(), world.size());
  coords_ = rank_coords(dims, world.rank());
  groups_.reserve(kGroupKinds.size());
  for (GroupKind kind : kGroupKinds) {  // same order on every rank: each split is collective
    const SplitKey s = group_split(dims, world.rank(), kind);
    groups_.push_back(world.split(s.color, s.key, std::string(group_kind_name(kind))));
  }
}

}  // namespace megatrain
