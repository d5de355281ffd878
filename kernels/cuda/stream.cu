// Streams and events: thin wrappers over the CUDA runtime that name what failed. kernels/device.h's
// Event calls these on CUDA; the caller owns what it creates and destroys it once.
#include "kernels/cuda/common.cuh"

namespace megatrain::MT_CUDA_NS {

cudaStream_t stream_create() {
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags (stream_create)");
  return s;
}

// The destroy calls run in destructors, so they do not throw: a failure there is a sticky context
// error that the next checked call reports.
void stream_destroy(cudaStream_t stream) noexcept { (void)cudaStreamDestroy(stream); }

void stream_synchronize(cudaStream_t stream) {
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (an earlier kernel on this stream failed)");
}

cudaEvent_t event_create() {
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDefault), "cudaEventCreateWithFlags (event_create)");
  return e;
}

void event_destroy(cudaEvent_t event) noexcept { (void)cudaEventDestroy(event); }

void event_record(cudaEvent_t event, cudaStream_t stream) {
  check_cuda(cudaEventRecord(event, stream), "cudaEventRecord (event and stream must be on the same device)");
}

void stream_wait_event(cudaStream_t stream, cudaEvent_t event) {
  check_cuda(cudaStreamWaitEvent(stream, event, 0), "cudaStreamWaitEvent");
}

void event_synchronize(cudaEvent_t event) {
  check_cuda(cudaEventSynchronize(event), "cudaEventSynchronize (work before the event failed)");
}

float event_elapsed_ms(cudaEvent_t start, cudaEvent_t end) {
  check_cuda(cudaEventSynchronize(end), "cudaEventSynchronize (end event of a timing)");
  float ms = 0.0f;
  check_cuda(cudaEventElapsedTime(&ms, start, end), "cudaEventElapsedTime (both events recorded, with timing)");
  return ms;
}

}  // namespace megatrain::MT_CUDA_NS
