#include "staging/staging.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

namespace ckpt {
namespace {

// Pages of [data, data + bytes) in memory now (mincore), without touching
// them.
uint64_t ResidentPages(std::byte* data, uint64_t bytes) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((bytes + page - 1) / page);
  if (::mincore(data, bytes, in.data()) != 0) return 0;
  uint64_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

TEST(StagingArenaTest, PreparedMemoryIsFaultedInBeforeTheFirstReserve) {
  // What Options::async_staging_prepare_bytes promises: the first
  // asynchronous save copies into pages already there.
  constexpr uint64_t kBytes = uint64_t{64} << 20;
  StagingArena arena;
  arena.PrepareInBackground(kBytes);
  Result<std::span<std::byte>> memory = arena.Reserve(kBytes - 4096);
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  EXPECT_EQ(memory->size(), kBytes);
  EXPECT_EQ(ResidentPages(memory->data(), kBytes), kBytes / 4096);
  // Later reserves that fit reuse it.
  Result<std::span<std::byte>> again = arena.Reserve(1000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data(), memory->data());
}

TEST(StagingArenaTest, AFreshArenaFaultsItsMemoryInOnFirstUse) {
  // Without preparation nothing is touched until the copy: the cost the
  // option moves off the caller's thread.
  constexpr uint64_t kBytes = uint64_t{64} << 20;
  StagingArena arena;
  Result<std::span<std::byte>> memory = arena.Reserve(kBytes);
  ASSERT_TRUE(memory.ok());
  EXPECT_EQ(ResidentPages(memory->data(), kBytes), 0u);
}

TEST(StagingArenaTest, AStateLargerThanWasPreparedGetsLargerMemory) {
  StagingArena arena;
  arena.PrepareInBackground(uint64_t{1} << 20);
  Result<std::span<std::byte>> memory = arena.Reserve(uint64_t{3} << 20);
  ASSERT_TRUE(memory.ok());
  EXPECT_GE(memory->size(), uint64_t{3} << 20);
  memory->back() = std::byte{7};  // the whole span is writable
}

TEST(StagingArenaTest, AnArenaPreparedAndNeverUsedIsReleased) {
  // Destroyed while (or after) its thread maps: joins and unmaps, no leak
  // and no write to freed memory (ASan and TSan run this).
  for (int i = 0; i < 4; ++i) {
    StagingArena arena;
    arena.PrepareInBackground(uint64_t{8} << 20);
  }
}

}  // namespace
}  // namespace ckpt
