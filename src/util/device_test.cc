#include "ckpt/device.h"

#include <gtest/gtest.h>

namespace ckpt {
namespace {

TEST(MemoryLocationTest, HostIsTheDefault) {
  EXPECT_EQ(MemoryLocation(), MemoryLocation::Host());
  EXPECT_TRUE(MemoryLocation().is_host());
  EXPECT_EQ(MemoryLocation().device(), -1);
  EXPECT_EQ(MemoryLocation().ToString(), "host");
}

TEST(MemoryLocationTest, CudaNamesItsOrdinal) {
  const MemoryLocation gpu = MemoryLocation::Cuda(3);
  EXPECT_FALSE(gpu.is_host());
  EXPECT_EQ(gpu.kind(), MemoryLocation::Kind::kCuda);
  EXPECT_EQ(gpu.device(), 3);
  EXPECT_EQ(gpu.ToString(), "cuda:3");
  EXPECT_EQ(MemoryLocation::Cuda(0).ToString(), "cuda:0");
  EXPECT_NE(gpu, MemoryLocation::Cuda(0));
  EXPECT_NE(MemoryLocation::Cuda(0), MemoryLocation::Host());
}

}  // namespace
}  // namespace ckpt
