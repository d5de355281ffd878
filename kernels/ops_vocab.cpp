// Dispatch of the ops over the vocabulary and positions: token and position embeddings, and the
// three steps of the sharded cross-entropy (see ops.cpp for the pattern).
#include "kernels/cpu/cpu.h"
#include "kernels/ops.h"
#include "kernels/ops_dispatch.h"

namespace megatrain {

using namespace dispatch;

void embedding_forward(const Stream& s, Tensor out, Tensor tokens, Tensor wte, int vocab_begin) {
  DeviceBackend* dev = backend_for(s, "embedding_forward", {out, tokens, wte});
  const int V = static_cast<int>(wte.shape[0]), C = static_cast<int>(wte.shape[1]);
  expect_f32(out, "out", tokens.numel() * C);
  if (dev) return dev->embedding_forward(s, out.f32(), tokens.i32(), wte.f32(), tokens.numel(), V, C, vocab_begin);
  cpu::embedding_forward(out.f32(), tokens.i32(), wte.f32(), tokens.numel(), V, C, vocab_begin);
}

void embedding_backward(const Stream& s, Tensor dwte, Tensor dout, Tensor tokens, int vocab_begin) {
  DeviceBackend* dev = backend_for(s, "embedding_backward", {dwte, dout, tokens});
  const int V = static_cast<int>(dwte.shape[0]), C = static_cast<int>(dwte.shape[1]);
  expect_f32(dout, "dout", tokens.numel() * C);
  if (dev)
    return dev->embedding_backward(s, dwte.f32(), dout.f32(), tokens.i32(), tokens.numel(), V, C, vocab_begin);
  cpu::embedding_backward(dwte.f32(), dout.f32(), tokens.i32(), tokens.numel(), V, C, vocab_begin);
}

namespace {
// A position table (P, C) for rows at positions (first_row + i) mod T.
void check_positions(Tensor table, int C, int T, int64_t first_row, const char* name) {
  MT_CHECK(T >= 1 && table.shape[0] >= T && last(table) == C && first_row >= 0,
           "position embedding: T = {} and first_row = {} need T <= {} rows ({}) and width {}", T, first_row, name,
           table.shape[0], C);
}
}  // namespace

void position_embedding_forward(const Stream& s, Tensor out, Tensor wpe, int T, int64_t first_row) {
  DeviceBackend* dev = backend_for(s, "position_embedding_forward", {out, wpe});
  check_positions(wpe, last(out), T, first_row, "wpe");
  if (dev) return dev->position_embedding_forward(s, out.f32(), wpe.f32(), rows(out), last(out), T, first_row);
  cpu::position_embedding_forward(out.f32(), wpe.f32(), rows(out), last(out), T, first_row);
}

void position_embedding_backward(const Stream& s, Tensor dwpe, Tensor dout, int T, int64_t first_row) {
  DeviceBackend* dev = backend_for(s, "position_embedding_backward", {dwpe, dout});
  check_positions(dwpe, last(dout), T, first_row, "dwpe");
  if (dev) return dev->position_embedding_backward(s, dwpe.f32(), dout.f32(), rows(dout), last(dout), T, first_row);
  cpu::position_embedding_backward(dwpe.f32(), dout.f32(), rows(dout), last(dout), T, first_row);
}

namespace {
void check_loss_rows(Tensor logits, Tensor targets, int valid, std::initializer_list<Tensor> per_row) {
  MT_CHECK(valid >= 0 && valid <= last(logits), "{} valid columns of {} logits", valid, last(logits));
  const int64_t N = rows(logits);
  MT_CHECK(targets.numel() == N, "targets has {} elements, expected {}", targets.numel(), N);
  for (const Tensor& t : per_row) expect_f32(t, "per-row loss statistic", N);
}
}  // namespace

void cross_entropy_max(const Stream& s, Tensor row_max, Tensor logits, int valid) {
  DeviceBackend* dev = backend_for(s, "cross_entropy_max", {row_max, logits});
  MT_CHECK(valid >= 0 && valid <= last(logits), "{} valid columns of {} logits", valid, last(logits));
  expect_f32(row_max, "row_max", rows(logits));
  if (dev) return dev->cross_entropy_max(s, row_max.f32(), logits.f32(), rows(logits), last(logits), valid);
  cpu::cross_entropy_max(row_max.f32(), logits.f32(), rows(logits), last(logits), valid);
}

void cross_entropy_sums(const Stream& s, Tensor sum_exp, Tensor target_logit, Tensor logits, Tensor row_max,
                        Tensor targets, int vocab_begin, int valid, LossGrad grad) {
  DeviceBackend* dev = backend_for(s, "cross_entropy_sums", {sum_exp, target_logit, logits, row_max, targets});
  check_loss_rows(logits, targets, valid, {sum_exp, target_logit, row_max});
  if (dev)
    return dev->cross_entropy_sums(s, sum_exp.f32(), target_logit.f32(), logits.f32(), row_max.f32(), targets.i32(),
                                   rows(logits), last(logits), valid, vocab_begin, grad);
  cpu::cross_entropy_sums(sum_exp.f32(), target_logit.f32(), logits.f32(), row_max.f32(), targets.i32(),
                          rows(logits), last(logits), valid, vocab_begin, grad == LossGrad::in_place);
}

void cross_entropy_finish(const Stream& s, Tensor losses, Tensor logits, Tensor row_max, Tensor sum_exp,
                          Tensor target_logit, Tensor targets, int vocab_begin, int valid, LossGrad grad,
                          float dlogits_scale) {
  DeviceBackend* dev =
      backend_for(s, "cross_entropy_finish", {losses, logits, row_max, sum_exp, target_logit, targets});
  check_loss_rows(logits, targets, valid, {losses, row_max, sum_exp, target_logit});
  float* dlogits = grad == LossGrad::in_place ? logits.f32() : nullptr;
  if (dev)
    return dev->cross_entropy_finish(s, losses.f32(), dlogits, row_max.f32(), sum_exp.f32(), target_logit.f32(),
                                     targets.i32(), rows(logits), last(logits), valid, vocab_begin, dlogits_scale);
  cpu::cross_entropy_finish(losses.f32(), dlogits, row_max.f32(), sum_exp.f32(), target_logit.f32(), targets.i32(),
                            rows(logits), last(logits), valid, vocab_begin, dlogits_scale);
}

}  // namespace megatrain
