// RankRun's state as the host sees it (trainer/rank_run.h): the tensors a checkpoint saves, the
// held parameters the replica check compares, and the hand-back after a load or an injected change
// writes them. On a device the host copies (HostState) go between the stream's memory and these.
#include "trainer/rank_run.h"

#include "kernels/ops.h"

namespace megatrain {

FlatSlice RankRun::held_params_host() {
  const FlatRange held = zero.held_params_range();
  float* params = zero.held_params();
  if (on_device()) {
    copy_to_host(stream, host_state_->params.data(), Tensor(params, Shape{held.size()}).on(stream.device));
    params = host_state_->params.data();
  }
  return {params, held.begin, held.end};
}

CheckpointTensors RankRun::checkpoint_tensors() {
  const FlatRange opt = optimizer.range(), part = zero.partition();
  float *exp_avg = optimizer.exp_avg(), *exp_avg_sq = optimizer.exp_avg_sq();
  if (on_device()) {
    HostState& h = *host_state_;
    copy_to_host(stream, h.exp_avg.data(), Tensor(exp_avg, Shape{opt.size()}).on(stream.device));
    copy_to_host(stream, h.exp_avg_sq.data(), Tensor(exp_avg_sq, Shape{opt.size()}).on(stream.device));
    exp_avg = h.exp_avg.data(), exp_avg_sq = h.exp_avg_sq.data();
  }
  CheckpointTensors t{&layout,
                      held_params_host(),
                      {exp_avg, opt.begin, opt.end},
                      {exp_avg_sq, opt.begin, opt.end},
                      part.begin,
                      part.end,
                      &stored_layout};
  if (experts) {
    const int64_t b = experts->begin;
    const FlatRange eh = experts->zero.held_params_range().shifted(b), eo = experts->optimizer.range();
    const FlatRange ep = experts->zero.partition().shifted(b);
    float* params = experts->zero.held_params();
    float *m = experts->optimizer.exp_avg(), *v = experts->optimizer.exp_avg_sq();
    if (on_device()) {
      HostState& h = *host_state_;
      copy_to_host(stream, h.expert_params.data(), Tensor(params, Shape{eh.size()}).on(stream.device));
      copy_to_host(stream, h.expert_exp_avg.data(), Tensor(m, Shape{eo.size()}).on(stream.device));
      copy_to_host(stream, h.expert_exp_avg_sq.data(), Tensor(v, Shape{eo.size()}).on(stream.device));
      params = h.expert_params.data(), m = h.expert_exp_avg.data(), v = h.expert_exp_avg_sq.data();
    }
    t.experts = CheckpointPiece{{params, eh.begin, eh.end}, {m, eo.begin, eo.end}, {v, eo.begin, eo.end}, ep.begin,
                                ep.end};
  }
  return t;
}

void RankRun::params_written() {
  if (on_device()) {
    const FlatRange held = zero.held_params_range();
    copy_from_host(stream, Tensor(zero.held_params(), Shape{held.size()}).on(stream.device),
                   host_state_->params.data());
    if (experts) {
      const FlatRange eh = experts->zero.held_params_range();
      copy_from_host(stream, Tensor(experts->zero.held_params(), Shape{eh.size()}).on(stream.device),
                     host_state_->expert_params.data());
    }
  }
  zero.params_written();
  if (experts) experts->zero.params_written();
}

void RankRun::state_written() {
  if (on_device()) {
    const HostState& h = *host_state_;
    const auto up = [&](const AdamW& o, const std::vector<float>& m, const std::vector<float>& v) {
      const FlatRange opt = o.range();
      copy_from_host(stream, Tensor(o.exp_avg(), Shape{opt.size()}).on(stream.device), m.data());
      copy_from_host(stream, Tensor(o.exp_avg_sq(), Shape{opt.size()}).on(stream.device), v.data());
    };
    up(optimizer, h.exp_avg, h.exp_avg_sq);
    if (experts) up(experts->optimizer, h.expert_exp_avg, h.expert_exp_avg_sq);
  }
  params_written();
}

}  // namespace megatrain
