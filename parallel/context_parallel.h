// Context parallelism's split of each sequence over the cp ranks of a group (parallel.cp), balanced
// for causal attention (Megatron-Core's scheme): a sequence of T tokens is cut into 2·cp chunks of
// T / (2·cp), and rank r holds chunks r and 2·cp − 1 − r back to back — local rows [0, c) and
// [c, 2c), c the chunk length. Under the causal mask a query attends to every key before it, so an
// early chunk costs little and a late one much; pairing chunk r with its mirror gives every rank
// the same work (the (2c)² /2 + … of one early and one late chunk). At cp = 1 the one rank holds
// chunks 0 and 1: the whole sequence in order.
//
// Pure functions of (cp, rank, T): the data loader's rows, the positions (learned and RoPE) and the
// ring attention's masks (model/ring_attention.h, model/ulysses_attention.h) all read them.
#pragma once
#include <cstdint>
#include <functional>

namespace megatrain {

// How a cp group computes attention over the whole sequence (parallel.cp_comm):
//   ring       — key/value blocks passed around the ring, each rank's queries attending to each
//                block in turn, partial results merged by their log-sum-exp (sends overlapped with
//                the block's attention);
//   all_to_all — heads redistributed so each rank attends over the whole sequence for n_heads / cp
//                of the heads (DeepSpeed-Ulysses), then redistributed back.
enum class CpComm { ring, all_to_all };

struct CpSplit {
  int cp = 1, rank = 0;
  int seq_len = 0;  // T, of the whole sequence; a multiple of 2·cp

  int chunk() const { return seq_len / (2 * cp); }
  int local_len() const { return seq_len / cp; }
  // Global chunk index of local half k (0: rows [0, c), 1: rows [c, 2c)), of rank `r`.
  int chunk_of(int k, int r) const { return k == 0 ? r : 2 * cp - 1 - r; }
  int chunk_of(int k) const { return chunk_of(k, rank); }
  // Position in the sequence of local row t (0 ≤ t < local_len()).
  int position(int t) const {
    const int c = chunk();
    return chunk_of(t < c ? 0 : 1) * c + t % c;
  }
  // This rank's rows of B sequences: local (B, T/cp) ← full (B, T).
  void take_local(const int32_t* full, int32_t* local, int B) const;
};

// Calls f(first, count, position) for each run of consecutive rows with consecutive positions among
// the `rows` rows from local row `first_row` on, rows being B sequences of split.local_len() back to
// back (row i of the run at position + i; first counted from first_row). Runs break where a
// sequence or a chunk ends.
void for_each_position_run(const CpSplit& split, int64_t first_row, int64_t rows,
                           const std::function<void(int64_t first, int64_t count, int position)>& f);

}  // namespace megatrain
