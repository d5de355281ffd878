// The pipeline executor: runs one stage's list of steps (parallel/pipeline_schedule.h) over the
// pipeline group's point-to-point links. Activations go to the next stage and input gradients back
// to the previous one as non-blocking sends; the receive for the next forward and the next backward
// is posted as soon as the step before it starts, so it overlaps that step's compute. Shapes come
// from the config (every message is `floats` floats), so no handshake is needed; a message is
// tagged with its micro-batch and direction, and MPI's in-order delivery per (source, tag) keeps
// the steps of consecutive training steps apart. Any list the simulator plays without deadlock
// runs here without deadlock: sends never block, and each receive is waited for only by the step
// that consumes it.
//
// Micro-batch slots: a forward takes the lowest free slot and its backward frees it (its weight
// step, in a list that splits backwards), so the stage needs as many slots as the list holds
// micro-batches at once (peak_held()). Weight steps communicate nothing.
#pragma once
#include <vector>

#include "kernels/tensor.h"
#include "parallel/comm.h"
#include "parallel/pipeline_schedule.h"

namespace megatrain {

// What a stage computes, as the executor sees it (the trainer implements it over model/stage.h).
class PipelineWork {
 public:
  virtual ~PipelineWork() = default;
  // Forward of micro-batch `micro` into `slot`; `input` is the previous stage's output (empty on
  // the first stage). Returns the output for the next stage (ignored on the last), valid until the
  // slot's backward.
  virtual Tensor forward(int slot, int micro, Tensor input) = 0;
  // Backward of the micro-batch in `slot`; `dout` is the gradient of its output from the next
  // stage (empty on the last). Returns the input gradient (ignored on the first), valid until the
  // next backward. In a list with weight steps this is the input-gradient half only.
  virtual Tensor backward(int slot, Tensor dout) = 0;
  // The weight-gradient half of the slot's backward (lists that split backwards).
  virtual void weight(int slot) = 0;
};

// The most micro-batches `steps` holds at once (forward done, backward — or weight step — not yet).
int peak_held(const std::vector<PipeStep>& steps);

class PipelineExecutor {
 public:
  // `pp` is the pipeline group (rank = stage); every message is `floats` floats.
  PipelineExecutor(const Comm& pp, int64_t floats, int slots);

  // Runs the list; returns when every step ran and every send completed.
  void run(const std::vector<PipeStep>& steps, PipelineWork& work);
  // Forwards only (evaluation): micro-batches 0 … n − 1 through slot 0, stage after stage.
  void run_forward(int micro_batches, PipelineWork& work);

 private:
  struct Posted {
    int micro = -1;  // the micro-batch whose message is (being) received into buf, −1: none
    Work work;
  };
  bool first() const { return pp_.rank() == 0; }
  bool last() const { return pp_.rank() + 1 == pp_.size(); }

  const Comm& pp_;
  int64_t floats_;
  std::vector<int> slot_of_;                     // micro-batch → slot, −1 when none
  std::vector<bool> busy_;                       // per slot
  std::vector<float> in_[2][2];                  // [forward, backward] × two receive buffers
  Posted posted_[2][2];                          // what each receive buffer is getting
  std::vector<float> out_[2];                    // two send buffers for input gradients
  Work out_work_[2];
  std::vector<Work> act_sends_;                  // per slot: the send of its forward output
  int out_next_ = 0;
};

}  // namespace megatrain
