// Event (kernels/device.h): on CPU a host time stamp, since every op has finished when it returns;
// on CUDA a cudaEvent_t through kernels/cuda/stream.cu.
#include "kernels/device.h"

#include <utility>

#ifdef MEGATRAIN_HAS_CUDA
#include "kernels/cuda/cuda.h"
#endif

namespace megatrain {
namespace {

#ifdef MEGATRAIN_HAS_CUDA
cudaEvent_t cuda_event(void* handle) { return static_cast<cudaEvent_t>(handle); }
cudaStream_t cuda_stream(const Stream& s) { return static_cast<cudaStream_t>(s.handle); }
#else
[[noreturn]] void no_cuda() {
  check_failed(__FILE__, __LINE__, "MEGATRAIN_HAS_CUDA",
               "a CUDA event in a build without the CUDA backend (configure with -DMEGATRAIN_CUDA=ON)");
}
#endif

}  // namespace

Event::Event(Device device) : device_(device) {
  if (device_ == Device::cpu) return;
#ifdef MEGATRAIN_HAS_CUDA
  handle_ = cuda::event_create();
#else
  no_cuda();
#endif
}

Event::~Event() {
#ifdef MEGATRAIN_HAS_CUDA
  if (handle_) cuda::event_destroy(cuda_event(handle_));
#endif
}

Event::Event(Event&& other) noexcept
    : device_(other.device_),
      handle_(std::exchange(other.handle_, nullptr)),
      recorded_(std::exchange(other.recorded_, false)),
      cpu_time_(other.cpu_time_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    Event old(std::move(*this));
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
    recorded_ = std::exchange(other.recorded_, false);
    cpu_time_ = other.cpu_time_;
  }
  return *this;
}

void Event::record(const Stream& s) {
  MT_CHECK(s.device == device_, "recording an event of one device on a stream of another (create the Event with "
                                "the stream's device)");
  recorded_ = true;
  if (device_ == Device::cpu) {
    cpu_time_ = std::chrono::steady_clock::now();
    return;
  }
#ifdef MEGATRAIN_HAS_CUDA
  cuda::event_record(cuda_event(handle_), cuda_stream(s));
#endif
}

void Event::synchronize() const {
  MT_CHECK(recorded_, "synchronizing on an event never recorded (record it on a stream first)");
#ifdef MEGATRAIN_HAS_CUDA
  if (device_ == Device::cuda) cuda::event_synchronize(cuda_event(handle_));
#endif
}

void stream_wait(const Stream& s, const Event& e) {
  MT_CHECK(e.recorded_, "a stream waiting on an event never recorded (record it on the producing stream first)");
  MT_CHECK(s.device == e.device_, "a stream waiting on an event of another device");
#ifdef MEGATRAIN_HAS_CUDA
  if (s.device == Device::cuda) cuda::stream_wait_event(cuda_stream(s), cuda_event(e.handle_));
#endif
}

float elapsed_ms(const Event& start, const Event& end) {
  MT_CHECK(start.recorded_ && end.recorded_, "timing between events that are not both recorded");
  MT_CHECK(start.device_ == end.device_, "timing between events of two devices");
  if (start.device_ == Device::cpu)
    return std::chrono::duration<float, std::milli>(end.cpu_time_ - start.cpu_time_).count();
#ifdef MEGATRAIN_HAS_CUDA
  return cuda::event_elapsed_ms(cuda_event(start.handle_), cuda_event(end.handle_));
#else
  no_cuda();
#endif
}

}  // namespace megatrain
