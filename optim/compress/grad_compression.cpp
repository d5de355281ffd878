// The choice of gradient compressor (optim/compress/grad_compression.h).
#include "optim/compress/grad_compression.h"

namespace megatrain {

std::unique_ptr<GradCompressor> make_powersgd(const Comm& comm, std::vector<MatrixSpan> matrices, int rank,
                                              uint64_t seed);  // optim/compress/powersgd.cpp
std::unique_ptr<GradCompressor> make_onebit(const Comm& comm);    // optim/compress/onebit.cpp

const char* grad_compression_name(GradCompression c) {
  switch (c) {
    case GradCompression::none: return "none";
    case GradCompression::powersgd: return "powersgd";
    case GradCompression::onebit: return "onebit";
  }
  return "?";
}

std::unique_ptr<GradCompressor> make_grad_compressor(GradCompression method, const Comm& comm,
                                                     std::vector<MatrixSpan> matrices, int rank, uint64_t seed) {
  switch (method) {
    case GradCompression::powersgd: return make_powersgd(comm, std::move(matrices), rank, seed);
    case GradCompression::onebit: return make_onebit(comm);
    case GradCompression::none: break;
  }
  return nullptr;
}

}  // namespace megatrain
