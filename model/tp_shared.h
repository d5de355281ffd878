// The parameter values several tensor-parallel ranks hold (ParamLayout::shared(): replicated
// tensors, key/value heads replicated under GQA): their partial gradients summed over the ranks
// that share them. (The global norm counts each of them once: optim/clip.h.)
#pragma once
#include <map>
#include <vector>

#include "kernels/flat_buffer.h"
#include "model/params.h"
#include "parallel/comm.h"

namespace megatrain {

class TpSharedParams {
 public:
  // Collective over `tp` (it splits one communicator per distinct sharer count); `layout` must
  // outlive this object. The gradients live on `stream`'s device, and so does the packing buffer.
  TpSharedParams(const ParamLayout& layout, const Comm& tp, const Stream& stream = Stream::cpu());

  // Sums over their sharers the partial gradients that lie in `range` (grads[j] = flat element
  // range.begin + j): one all-reduce per sharer group, over the ranges packed back to back. Every
  // tp rank must call it with the same range (the layout's flat ranges are the same on every tp
  // rank). Allocates nothing.
  void reduce_partial_grads(float* grads, FlatRange range) const;

 private:
  const ParamLayout& layout_;
  Stream stream_;
  struct Group {
    Comm comm;         // this rank's sharers
    FlatBuffer pack;   // room for every partial-gradient range of this sharer count
  };
  std::map<int, Group> groups_;      // sharers → its group
};

}  // namespace megatrain
