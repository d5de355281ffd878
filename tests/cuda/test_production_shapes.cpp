// The ops whose kernels change their launch with the shape, at the shapes of the models users train
// (configs/gpt2_124m.toml, configs/llama_1b3.toml), on a GPU against the CPU op: attention at
// GPT-2's 1024 tokens of 12 heads of 64 and at Llama's 2048 tokens of 16 heads of 128 with 8
// key/value heads (the larger shared-memory tiles, opted in above 48 KiB), the loss over GPT-2's
// padded vocabulary of 50304, the norms at widths 768 and 2048, and context parallelism's block
// attention, merge and row copy at GPT-2's shape with cp 2. Same harness and tolerances as
// tests/simt/test_ops_parity.cpp (twin.h, against_cpu.h); too slow for the host emulation, so only
// in the GPU binary test_device_gpu.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/ops.h"
#include "tests/simt/twin.h"

namespace megatrain::test {
namespace {

class ProductionShapes : public OpsParity {
 protected:
  void attention_both_ways(int B, int T, int H, int Hkv, int D) {
    Twin qkv = f32({B, T, (H + 2 * Hkv) * D}, 1), out = f32({B, T, H * D}, 2), lse = f32({B, H, T}, 3);
    both([&](const Stream& s, Side d) { attention_forward(s, out(d), lse(d), qkv(d), H, Hkv); });
    expect_close(out, "out");
    expect_close(lse, "lse");
    Twin dout = f32({B, T, H * D}, 4), dqkv = f32({B, T, (H + 2 * Hkv) * D}, 5);
    both([&](const Stream& s, Side d) { attention_backward(s, dqkv(d), dout(d), qkv(d), out(d), lse(d), H, Hkv); });
    expect_close(dqkv, "dqkv");
  }
};

TEST_F(ProductionShapes, AttentionOfGpt2At1024Tokens) { attention_both_ways(1, 1024, 12, 12, 64); }

TEST_F(ProductionShapes, AttentionOfLlamaAt2048TokensWithGroupedKeysAndValues) {
  attention_both_ways(1, 2048, 16, 8, 128);
}

// Context parallelism's block attention at GPT-2 124M's shape with cp 2 (1024 tokens in four chunks
// of 256, 12 heads of 64): the last chunk's queries against the first chunk's keys (no mask) and
// against its own (causal), merged by their log-sum-exps, both ways round, on q/k/v scaled by 4 so
// that the scores reach the hundreds (the merge's and the blocks' max shifts); then the gradients
// of both pairs added, and a key/value block packed and its gradient added by the row copy.
TEST_F(ProductionShapes, BlockAttentionMergeAndRowCopyOfGpt2AtCp2) {
  const int B = 1, T = 1024, c = 256, H = 12, D = 64, qw = H * D, row = 3 * qw;
  const AttnHeads heads{H, H, D};
  Twin qkv = f32({B, T, row}, 11, 4.0f), lse = f32({B, H, T}, 12), part_lse = f32({B, H, T}, 13);
  for (const bool own_first : {true, false}) {
    Twin out = f32({B, T, qw}, 14), part = f32({B, T, qw}, 15);
    const int first = own_first ? 3 : 0, second = own_first ? 0 : 3;
    both([&](const Stream& s, Side d) {
      const AttnRows q{qkv(d), 0, 3 * c, c};
      attention_block_forward(s, {out(d), 0, 3 * c, c}, lse(d), q, {qkv(d), qw, first * c, c},
                              {qkv(d), 2 * qw, first * c, c}, heads, first == 3);
      attention_block_forward(s, {part(d), 0, 3 * c, c}, part_lse(d), q, {qkv(d), qw, second * c, c},
                              {qkv(d), 2 * qw, second * c, c}, heads, second == 3);
      attention_merge(s, {out(d), 0, 3 * c, c}, lse(d), {part(d), 0, 3 * c, c}, part_lse(d), heads);
    });
    expect_close(out, own_first ? "merged out, own chunk first" : "merged out, first chunk first");
    expect_close(lse, "merged lse");
    Twin dout = f32({B, T, qw}, 16), dqkv = f32({B, T, row}, 17);
    both([&](const Stream& s, Side d) {
      for (const int k : {0, 3})
        attention_block_backward(s, {dqkv(d), 0, 3 * c, c}, {dqkv(d), qw, k * c, c}, {dqkv(d), 2 * qw, k * c, c},
                                 {dout(d), 0, 3 * c, c}, {qkv(d), 0, 3 * c, c}, {qkv(d), qw, k * c, c},
                                 {qkv(d), 2 * qw, k * c, c}, {out(d), 0, 3 * c, c}, lse(d), heads, k == 3);
    });
    expect_close(dqkv, "dqkv of both pairs");
  }
  Twin packed = f32({B, c, 2 * qw}, 18), grads = f32({B, T, row}, 19);
  both([&](const Stream& s, Side d) {
    attention_rows_copy(s, {packed(d), 0, 0, c}, {qkv(d), qw, c, c}, 2 * qw, false);
    attention_rows_copy(s, {grads(d), qw, c, c}, {packed(d), 0, 0, c}, 2 * qw, true);
  });
  expect_bitwise(packed, "packed key/value block");
  expect_bitwise(grads, "added key/value gradients");
}

// The three steps of the loss, gradient in place and not, over GPT-2's vocabulary of 50257 words
// padded to 50304 columns, on a few rows whose targets sit at both ends and in the middle.
TEST_F(ProductionShapes, CrossEntropyOverGpt2sPaddedVocabulary) {
  const int V = 50304, valid = 50257, rows = 5;
  for (LossGrad grad : {LossGrad::none, LossGrad::in_place}) {
    Twin logits = f32({rows, V}, 6, 3.0f), targets = i32({rows}, {0, 50256, 25000, 1, 40000});
    Twin row_max = f32({rows}, 7), sum_exp = f32({rows}, 8), target_logit = f32({rows}, 9), losses = f32({rows}, 10);
    both([&](const Stream& s, Side d) { cross_entropy_max(s, row_max(d), logits(d), valid); });
    expect_bitwise(row_max, "row_max");
    both([&](const Stream& s, Side d) {
      cross_entropy_sums(s, sum_exp(d), target_logit(d), logits(d), row_max(d), targets(d), 0, valid, grad);
    });
    expect_close(sum_exp, "sum_exp");
    expect_bitwise(target_logit, "target_logit");
    both([&](const Stream& s, Side d) {
      cross_entropy_finish(s, losses(d), logits(d), row_max(d), sum_exp(d), target_logit(d), targets(d), 0, valid, grad,
                           1.0f / rows);
    });
    expect_close(losses, "losses");
    expect_close(logits, "dlogits");
  }
}

// LayerNorm (GPT-2's width) and RMSNorm (Llama's), forward and backward with the residual's gradient,
// at both widths each: 64 rows.
TEST_F(ProductionShapes, NormsAtWidths768And2048) {
  const int N = 64;
  for (int C : {768, 2048}) {
    Twin x = f32({N, C}, 11, 2.0f), w = f32({C}, 12), b = f32({C}, 13), out = f32({N, C}, 14);
    Twin mean = f32({N}, 15), rstd = f32({N}, 16);
    Twin dout = f32({N, C}, 17), dres = f32({N, C}, 18), dx = f32({N, C}, 19), dw = f32({C}, 20), db = f32({C}, 21);
    both([&](const Stream& s, Side d) { layernorm_forward(s, out(d), mean(d), rstd(d), x(d), w(d), b(d), 1e-5f); });
    expect_close(out, "layernorm out");
    expect_close(mean, "layernorm mean");
    expect_close(rstd, "layernorm rstd");
    both([&](const Stream& s, Side d) {
      layernorm_backward(s, dx(d), dw(d), db(d), dout(d), dres(d), x(d), w(d), mean(d), rstd(d));
    });
    expect_close(dx, "layernorm dinp");
    expect_close(dw, "layernorm dweight");
    expect_close(db, "layernorm dbias");
    both([&](const Stream& s, Side d) { rmsnorm_forward(s, out(d), rstd(d), x(d), w(d), 1e-6f); });
    expect_close(out, "rmsnorm out");
    expect_close(rstd, "rmsnorm rstd");
    both([&](const Stream& s, Side d) { rmsnorm_backward(s, dx(d), dw(d), dout(d), dres(d), x(d), w(d), rstd(d)); });
    expect_close(dx, "rmsnorm dinp");
    expect_close(dw, "rmsnorm dweight");
  }
}

}  // namespace
}  // namespace megatrain::test
