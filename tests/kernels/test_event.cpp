// Event on the CPU backend (kernels/device.h): ops are synchronous, so an event is reached when it
// is recorded; the checks name misuse (waiting on an event never recorded, mixing devices).
#include <gtest/gtest.h>

#include <thread>
#include <utility>

#include "kernels/device.h"

namespace megatrain {
namespace {

TEST(Event, CpuEventIsCompleteWhenRecorded) {
  const Stream s = Stream::cpu();
  Event e;
  EXPECT_FALSE(e.recorded());
  e.record(s);
  EXPECT_TRUE(e.recorded());
  e.synchronize();
  stream_wait(s, e);
}

TEST(Event, CpuElapsedTimeIsHostTimeBetweenRecords) {
  const Stream s = Stream::cpu();
  Event start, end;
  start.record(s);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  end.record(s);
  const float ms = elapsed_ms(start, end);
  EXPECT_GE(ms, 19.0f);
  EXPECT_LT(ms, 2000.0f);
}

TEST(Event, UnrecordedEventsAreErrors) {
  const Stream s = Stream::cpu();
  Event e, f;
  EXPECT_THROW(e.synchronize(), Error);
  EXPECT_THROW(stream_wait(s, e), Error);
  f.record(s);
  EXPECT_THROW(elapsed_ms(e, f), Error);
}

TEST(Event, MovedEventKeepsItsRecord) {
  const Stream s = Stream::cpu();
  Event e;
  e.record(s);
  Event moved(std::move(e));
  EXPECT_TRUE(moved.recorded());
  EXPECT_FALSE(e.recorded());  // NOLINT(bugprone-use-after-move): a moved-from event is empty
}

TEST(Event, RecordingOnAStreamOfAnotherDeviceIsAnError) {
  Event e;
  const Stream cuda_stream{Device::cuda, nullptr, Precision::fp32};
  EXPECT_THROW(e.record(cuda_stream), Error);
}

}  // namespace
}  // namespace megatrain
