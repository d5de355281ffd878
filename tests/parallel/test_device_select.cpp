// Unit tests of device_for_local_rank (parallel/device_select.h): one device per local rank, and an
// InputError naming the numbers and the fix when the node has too few — on every rank of the node.
#include <gtest/gtest.h>

#include <string>

#include "parallel/device_select.h"
#include "tests/input_error.h"

namespace megatrain {
namespace {

TEST(DeviceSelect, LocalRankIndexesTheVisibleDevices) {
  EXPECT_EQ(device_for_local_rank(0, 1, 1), 0);
  EXPECT_EQ(device_for_local_rank(0, 1, 8), 0);
  EXPECT_EQ(device_for_local_rank(3, 4, 4), 3);
  EXPECT_EQ(device_for_local_rank(7, 8, 8), 7);
}

// Four ranks on a node with two devices: ranks 0 and 1 fail too, with the same message.
TEST(DeviceSelect, TooFewDevicesFailsEveryRankSayingWhatToChange) {
  const std::string msg = test::input_error_of([] { device_for_local_rank(3, 4, 2); });
  EXPECT_NE(msg.find("4 ranks run on this node but this process sees 2 CUDA device(s)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at most 2 rank(s) per node"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << msg;
  EXPECT_EQ(test::input_error_of([] { device_for_local_rank(0, 4, 2); }), msg);
}

TEST(DeviceSelect, NoDeviceOrBadLocalRankIsInputError) {
  EXPECT_NE(test::input_error_of([] { device_for_local_rank(0, 1, 0); }).find("sees none"), std::string::npos);
  EXPECT_NE(test::input_error_of([] { device_for_local_rank(-1, 4, 4); }).find("local rank -1 is outside the node's 4"),
            std::string::npos);
  EXPECT_NE(test::input_error_of([] { device_for_local_rank(4, 4, 8); }).find("local rank 4 is outside"),
            std::string::npos);
}

}  // namespace
}  // namespace megatrain
