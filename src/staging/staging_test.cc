#include "staging/staging.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "testing/smaps.h"

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
  // The job's work before its first save, however slow the machine.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (arena.PreparedBytes() < kBytes &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(arena.PreparedBytes(), kBytes);
  Result<std::span<std::byte>> memory = arena.Reserve(kBytes - 4096);
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  EXPECT_EQ(memory->size(), kBytes);
  EXPECT_EQ(ResidentPages(memory->data(), kBytes), kBytes / 4096);
  // Later reserves that fit reuse it.
  Result<std::span<std::byte>> again = arena.Reserve(1000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data(), memory->data());
}

TEST(StagingArenaTest, ASaveBeforeThePreparationEndsTakesTheMemoryAsItIs) {
  // The first save does not wait for the whole preparation: it gets the
  // prepared mapping (whatever is faulted in so far, the rest faulted by
  // its copy), every byte of it usable.
  constexpr uint64_t kBytes = uint64_t{256} << 20;
  StagingArena arena;
  arena.PrepareInBackground(kBytes);
  Result<std::span<std::byte>> memory = arena.Reserve(kBytes);
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  EXPECT_EQ(memory->size(), kBytes);
  EXPECT_LE(arena.PreparedBytes(), kBytes);
  std::memset(memory->data(), 0x5a, memory->size());
  EXPECT_EQ(ResidentPages(memory->data(), kBytes), kBytes / 4096);
  // The thread is stopped: none of its writes lands in the memory once
  // the save has it (a late zero would corrupt the staged copy).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  uint64_t changed = 0;
  for (uint64_t at = 0; at < kBytes; at += 4096) {
    changed += (*memory)[at] != std::byte{0x5a};
  }
  EXPECT_EQ(changed, 0u);
}

TEST(StagingArenaTest, ReadsLandWhileTheMemoryIsFaultedInAndStayThere) {
  // A load's reads land in memory ReserveForReads hands over at once while
  // its thread faults the pages in: the thread must never overwrite a byte
  // already there, and offering the pages for huge ones afterwards keeps
  // every byte.
  constexpr uint64_t kBytes = uint64_t{128} << 20;
  StagingArena arena;
  Result<std::span<std::byte>> memory = arena.ReserveForReads(kBytes);
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  ASSERT_GE(memory->size(), kBytes);
  // Back to front, so that the writes meet the thread's faults midway.
  auto* words = reinterpret_cast<uint64_t*>(memory->data());
  const uint64_t n = kBytes / sizeof(uint64_t);
  for (uint64_t i = n; i-- > 0;) words[i] = i * 0x9e3779b97f4a7c15ull;
  arena.OfferForHugePages();
  // The next use reuses the memory.
  Result<std::span<std::byte>> again = arena.ReserveForReads(kBytes);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data(), memory->data());
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < n; ++i) {
    wrong += words[i] != i * 0x9e3779b97f4a7c15ull;
  }
  EXPECT_EQ(wrong, 0u) << "bytes written into the staging memory changed";
  EXPECT_EQ(ResidentPages(memory->data(), kBytes), kBytes / 4096);
}

TEST(StagingArenaTest, ALoadsMemoryIsLeftToTheKernelForHugePages) {
  // After a load that mapped the staging memory, no thread of the arena
  // gathers it into huge pages (that slowed whatever came next, four times
  // over for a load of 2 GiB): it is marked for the kernel's khugepaged.
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(thp, mode);
  if (mode.empty() || mode.find("[never]") != std::string::npos) {
    GTEST_SKIP() << "no transparent huge pages on this kernel (" << mode
                 << "): nothing to offer the memory to";
  }
  constexpr uint64_t kBytes = uint64_t{16} << 20;
  StagingArena arena;
  Result<std::span<std::byte>> memory = arena.ReserveForReads(kBytes);
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  std::memset(memory->data(), 0x5a, kBytes);
  const auto flags = [&] {
    return testing::SmapsLineOf(memory->data(), "VmFlags:");
  };
  EXPECT_EQ(flags().find(" hg"), std::string::npos)
      << "a load's memory is marked before the load is done";
  arena.OfferForHugePages();
  EXPECT_NE(flags().find(" hg"), std::string::npos) << flags();
  Result<std::span<std::byte>> again = arena.ReserveForReads(kBytes);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data(), memory->data());
  EXPECT_EQ(static_cast<unsigned char>((*again)[kBytes - 1]), 0x5au);
}

TEST(StagingArenaTest, KeepAtMostUnmapsOnlyMemoryOverTheBound) {
  constexpr uint64_t kBytes = uint64_t{8} << 20;
  StagingArena arena;
  ASSERT_TRUE(arena.ReserveForReads(kBytes).ok());
  arena.KeepAtMost(0);  // no bound
  EXPECT_GE(arena.capacity(), kBytes);
  arena.KeepAtMost(2 * kBytes);
  EXPECT_GE(arena.capacity(), kBytes);
  arena.KeepAtMost(kBytes / 2);
  EXPECT_EQ(arena.capacity(), 0u);
  EXPECT_EQ(arena.available(), 0u);
  // Memory being prepared counts too, and goes the same way.
  StagingArena prepared;
  prepared.PrepareInBackground(kBytes);
  prepared.KeepAtMost(kBytes / 2);
  EXPECT_EQ(prepared.available(), 0u);
  // Unmapped memory is mapped again when a load needs it.
  Result<std::span<std::byte>> again = arena.ReserveForReads(kBytes);
  ASSERT_TRUE(again.ok());
  EXPECT_GE(again->size(), kBytes);
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

// Maps `bytes` of new memory (no page there yet).
std::byte* MapFresh(uint64_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
}

// Waits (up to a minute, however slow the machine) until every page of
// [data, data + bytes) is in memory; whether they are.
bool AllResidentSoon(std::byte* data, uint64_t bytes) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (ResidentPages(data, bytes) < bytes / 4096) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(FaultAheadTest, FaultsInNewMemoryAndKeepsWhatReadsWroteThere) {
  // What a load into new memory (LoadAll, Python's load()) relies on: its
  // reads find the pages there, and a page a read filled first is kept.
  constexpr uint64_t kBytes = uint64_t{64} << 20;
  std::byte* memory = MapFresh(kBytes);
  ASSERT_NE(memory, nullptr);
  // Two slabs, as a load cuts a tensor; a read lands in the back before
  // the threads get there.
  const std::vector<std::span<std::byte>> slabs = {
      {memory, kBytes / 2}, {memory + kBytes / 2, kBytes / 2}};
  {
    FaultAhead ahead(slabs);
    std::memset(memory + kBytes - 4096, 0x5a, 4096);
    EXPECT_TRUE(AllResidentSoon(memory, kBytes));
  }
  for (uint64_t i = kBytes - 4096; i < kBytes; ++i) {
    ASSERT_EQ(memory[i], std::byte{0x5a}) << "byte " << i << " changed";
  }
  EXPECT_EQ(memory[0], std::byte{0});
  ::munmap(memory, kBytes);
}

TEST(FaultAheadTest, LeavesMemoryTheCallerUsedAndSmallLoadsAlone) {
  // A streaming load into a job's own tensors (faulted in by the job) or a
  // load of a few MiB starts no faulting: a span whose first page is there
  // is skipped, and below 8 MiB in all nothing starts.
  constexpr uint64_t kBytes = uint64_t{32} << 20;
  std::byte* used = MapFresh(kBytes);
  std::byte* small = MapFresh(uint64_t{4} << 20);
  ASSERT_NE(used, nullptr);
  ASSERT_NE(small, nullptr);
  used[0] = std::byte{1};
  {
    FaultAhead a({{used, kBytes}});
    FaultAhead b({{small, uint64_t{4} << 20}});
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  EXPECT_EQ(ResidentPages(used, kBytes), 1u);
  EXPECT_EQ(ResidentPages(small, uint64_t{4} << 20), 0u);
  ::munmap(used, kBytes);
  ::munmap(small, uint64_t{4} << 20);
}

}  // namespace
}  // namespace ckpt
