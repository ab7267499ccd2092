#include "util/parallel_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace ckpt {
namespace {

// Buffers of the given sizes, filled with a pattern that differs per
// buffer and per byte, and zeroed targets of the same sizes.
struct Buffers {
  explicit Buffers(const std::vector<size_t>& sizes) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      src.emplace_back(sizes[i]);
      dst.emplace_back(sizes[i]);
      for (size_t b = 0; b < sizes[i]; ++b) {
        src[i][b] = static_cast<std::byte>((b * 131 + i * 7 + b / 4096) & 0xff);
      }
    }
  }
  std::vector<CopyJob> Jobs() {
    std::vector<CopyJob> jobs;
    for (size_t i = 0; i < src.size(); ++i) {
      jobs.push_back(CopyJob{dst[i].data(), src[i].data(), src[i].size()});
    }
    return jobs;
  }
  std::vector<std::vector<std::byte>> src, dst;
};

TEST(ParallelCopyTest, EveryByteOfEveryJobArrivesWhateverTheThreads) {
  // Empty, tiny, not a multiple of a slice, many slices.
  const std::vector<size_t> sizes = {0, 1, 4095, (4 << 20) + 3, 37 << 20, 9};
  for (int threads : {0, 1, 2, 3, 8}) {
    Buffers b(sizes);
    ASSERT_TRUE(ParallelCopy(b.Jobs(), threads).ok());
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(b.dst[i], b.src[i]) << "job " << i << ", threads " << threads;
    }
  }
}

// A copy large enough to stream past the caches: every target alignment
// against every source alignment, and tails that are not a multiple of the
// 64 bytes streamed at once.
TEST(ParallelCopyTest, AStreamedCopyArrivesWholeAtEveryAlignment) {
  const size_t big = kStreamingCopyFrom + 4099;
  std::vector<std::byte> src(big + 64), dst(big + 64);
  for (size_t b = 0; b < src.size(); ++b) {
    src[b] = static_cast<std::byte>((b * 151 + b / 977) & 0xff);
  }
  for (int threads : {1, 0}) {
    for (size_t d : {0, 1, 8, 15, 16, 33}) {
      for (size_t s : {0, 3, 16}) {
        std::fill(dst.begin(), dst.end(), std::byte{0});
        const size_t n = big - d - s;
        const CopyJob job{dst.data() + d, src.data() + s, n};
        ASSERT_TRUE(ParallelCopy({&job, 1}, threads).ok());
        const bool same =
            std::equal(src.begin() + s, src.begin() + s + n, dst.begin() + d) &&
            std::all_of(dst.begin(), dst.begin() + d,
                        [](std::byte x) { return x == std::byte{0}; }) &&
            std::all_of(dst.begin() + d + n, dst.end(),
                        [](std::byte x) { return x == std::byte{0}; });
        EXPECT_TRUE(same) << "target +" << d << ", source +" << s
                          << ", threads " << threads;
      }
    }
  }
}

TEST(ParallelCopyTest, ManyCallersShareThePool) {
  std::vector<std::thread> callers;
  std::vector<int> same(4, 0);
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([c, &same] {
      Buffers b({size_t{9} << 20, size_t{3} << 20});
      same[c] = ParallelCopy(b.Jobs()).ok() && b.dst == b.src;
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(same, std::vector<int>(4, 1));
}

TEST(ParallelCopyTest, UsesTheMachinesCores) {
  EXPECT_GE(CopyThreads(), 1);
  EXPECT_EQ(CopyThreads(),
            std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace ckpt
