// The pipeline executor: runs one stage's list of steps (parallel/pipeline_schedule.h) over the
// pipeline's links (parallel/pipeline_links.h: one first-in first-out communicator per link and
// direction). Activations go to the next virtual stage and input gradients back to the previous
// one as non-blocking sends; the receives of the next two inputs of each direction stay posted, so
// they overlap the steps before them. With v model chunks per rank, virtual stage c·pp + s is
// chunk c of rank s: forward inputs always come from rank s − 1 (rank pp − 1, chunk c − 1, on rank
// 0) and backward inputs from rank s + 1. Shapes come from the config (every message is `floats`
// floats), so no handshake is needed; a link's messages are consumed in the order they were sent
// (simulate() checks the lists for it), which also keeps the steps of consecutive training steps
// apart. Any list the simulator plays without deadlock runs here without deadlock: sends never
// block, each receive is waited for only by the step that consumes it, and no operation of a link
// waits behind an operation of another (which is what lets the same lists run on NCCL).
//
// Micro-batch slots, per chunk: a forward takes the chunk's lowest free slot and its backward
// frees it (its weight step, in a list that splits backwards), so chunk c needs as many slots as
// the list holds its micro-batches at once (peak_held(steps, c)). Weight steps communicate nothing.
#pragma once
#include <optional>
#include <vector>

#include "kernels/flat_buffer.h"
#include "kernels/tensor.h"
#include "parallel/comm.h"
#include "parallel/pipeline_links.h"
#include "parallel/pipeline_schedule.h"

namespace megatrain {

// What a stage computes, as the executor sees it (the trainer implements it over model/stage.h).
class PipelineWork {
 public:
  virtual ~PipelineWork() = default;
  // Forward of micro-batch `micro` through model chunk `chunk` into its `slot`; `input` is the
  // previous virtual stage's output (empty on the first). Returns the output for the next virtual
  // stage (ignored on the last), valid until the slot's backward.
  virtual Tensor forward(int chunk, int slot, int micro, Tensor input) = 0;
  // Backward of the micro-batch in the chunk's `slot`; `dout` is the gradient of its output from
  // the next virtual stage (empty on the last). Returns the input gradient (ignored on the first),
  // valid until the next backward. In a list with weight steps this is the input-gradient half.
  virtual Tensor backward(int chunk, int slot, Tensor dout) = 0;
  // The weight-gradient half of the slot's backward (lists that split backwards).
  virtual void weight(int chunk, int slot) = 0;
};

// The most micro-batches of model chunk `chunk` that `steps` holds at once (forward done, backward
// — or weight step — not yet).
int peak_held(const std::vector<PipeStep>& steps, int chunk = 0);

class PipelineExecutor {
 public:
  // `pp` is the pipeline group (rank = stage; collective over it when it has two stages or more:
  // the links are split from it); every message is `floats` floats; `slots[c]` is model chunk c's
  // number of slots. The messages' buffers live on `stream`'s device, as the stage's activations do.
  PipelineExecutor(const Comm& pp, int64_t floats, std::vector<int> slots, const Stream& stream = Stream::cpu());

  // Runs the list; returns when every step ran and every send completed.
  void run(const std::vector<PipeStep>& steps, PipelineWork& work);
  // Forwards only (evaluation): micro-batches 0 … n − 1 through every chunk in slot 0, in order.
  void run_forward(int micro_batches, PipelineWork& work);

 private:
  struct Posted {
    int tag = -1;  // the tag of the message (being) received into the buffer, −1: none
    Work work;
  };
  int chunks() const { return static_cast<int>(slots_.size()); }
  bool first(int chunk) const { return pp_.rank() == 0 && chunk == 0; }
  bool last(int chunk) const { return pp_.rank() + 1 == pp_.size() && chunk + 1 == chunks(); }
  // What identifies the message a step receives (its micro-batch, chunk and direction): checked
  // against the receive posted for it.
  int tag_of(PipeOp op, int micro, int chunk) const;
  // Runs the forward of (micro, chunk) from `in` in `slot` and sends its output on.
  void forward(int chunk, int slot, int micro, Tensor in, PipelineWork& work);

  const Comm& pp_;
  std::optional<PipelineLinks> links_;           // none with one stage and one chunk
  int64_t floats_;
  std::vector<int> slots_;                       // per chunk
  std::vector<std::vector<int>> slot_of_;        // [chunk][micro-batch] → slot, −1 when none
  std::vector<std::vector<bool>> busy_;          // [chunk][slot]
  Stream stream_;
  FlatBuffer in_[2][2];                          // [forward, backward] × two receive buffers
  Posted posted_[2][2];                          // what each receive buffer is getting
  FlatBuffer out_[2];                            // two send buffers for input gradients
  Work out_work_[2];
  std::vector<std::vector<Work>> act_sends_;     // [chunk][slot]: the send of its forward output
  int out_next_ = 0;
};

}  // namespace megatrain
