// NewRateLimitedStorage: writes, and reads where asked, are paced to the
// rate (a lower bound on their time, which sleeping guarantees; no upper
// bound, which a busy machine could break), bytes pass unchanged, deletes
// are not held, wrappers naming one file share one budget, and a rate of 0
// is no wrapper at all.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/storage.h"
#include "gtest/gtest.h"

namespace ckpt {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string Name() {
  static std::atomic<int> n{0};
  return "mem://rate-limited-" + std::to_string(n++);
}

TEST(RateLimitedStorageTest, WritesArePacedAndBytesPassUnchanged) {
  constexpr double kRate = 8 << 20;  // 8 MiB/s
  std::unique_ptr<Storage> s =
      NewRateLimitedStorage(OpenStorage(Name()).value(), kRate);
  const std::string mib(1 << 20, 'x');
  const auto t0 = Clock::now();
  ASSERT_TRUE(s->PutString("a", mib).ok());
  auto w = s->NewWritable("b").value();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        w->Append({reinterpret_cast<const std::byte*>(mib.data()), mib.size()})
            .ok());
  }
  ASSERT_TRUE(w->Close().ok());
  // 4 MiB at 8 MiB/s: the fourth MiB may start only after 3/8 s.
  EXPECT_GE(Since(t0), 3.0 / 8 - 0.01);
  EXPECT_EQ(s->ReadAll("a").value(), mib);
  EXPECT_EQ(s->ReadAll("b").value().size(), 3u << 20);
  EXPECT_EQ(s->Stat("b").value().size, 3u << 20);
  EXPECT_TRUE(s->Delete("a").ok());
}

TEST(RateLimitedStorageTest, ThreadsShareOneBudget) {
  constexpr double kRate = 16 << 20;
  std::unique_ptr<Storage> s =
      NewRateLimitedStorage(OpenStorage(Name()).value(), kRate);
  const std::string mib(1 << 20, 'y');
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2; ++i) {
        EXPECT_TRUE(
            s->PutString("t" + std::to_string(t) + "-" + std::to_string(i), mib)
                .ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  // 8 MiB at 16 MiB/s in all: the last one starts after 7/16 s.
  EXPECT_GE(Since(t0), 7.0 / 16 - 0.01);
  EXPECT_EQ(s->List("t").value().size(), 8u);
}

TEST(RateLimitedStorageTest, ARateOfZeroIsNoWrapper) {
  std::unique_ptr<Storage> target = OpenStorage(Name()).value();
  Storage* raw = target.get();
  EXPECT_EQ(NewRateLimitedStorage(std::move(target), 0).get(), raw);
}

std::span<std::byte> Bytes(std::string& s) {
  return {reinterpret_cast<std::byte*>(s.data()), s.size()};
}

TEST(RateLimitedStorageTest, ReadsArePacedLikeALink) {
  constexpr double kRate = 8 << 20;  // 8 MiB/s
  std::unique_ptr<Storage> target = OpenStorage(Name()).value();
  EXPECT_TRUE(target->capabilities().local_reads);  // mem://
  const std::string two(2 << 20, 'r');
  ASSERT_TRUE(target->PutString("a", two).ok());
  auto s = NewRateLimitedStorage(
      std::move(target), RateLimit{.bytes_per_second = kRate, .reads = true});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  // Paced reads cross a link, whatever lies behind it.
  EXPECT_FALSE((*s)->capabilities().local_reads);
  std::string got(two.size(), '\0');
  auto t0 = Clock::now();
  ASSERT_TRUE((*s)->ReadRange("a", 0, Bytes(got)).ok());
  // 2 MiB at 8 MiB/s: a quarter of a second, less a margin for the clock.
  EXPECT_GE(Since(t0), 0.8 * 2 / 8);
  EXPECT_EQ(got, two);
  t0 = Clock::now();
  EXPECT_EQ((*s)->ReadAll("a").value(), two);
  EXPECT_GE(Since(t0), 0.8 * 2 / 8);
  // ReadRangeFilling goes through the paced ReadRange.
  t0 = Clock::now();
  uint64_t filled = 0;
  ASSERT_TRUE(
      (*s)->ReadRangeFilling(
              "a", 1 << 20, Bytes(got).subspan(0, 1 << 20),
              [&](std::span<const std::byte> part) { filled += part.size(); })
          .ok());
  EXPECT_EQ(filled, 1u << 20);
  EXPECT_GE(Since(t0), 0.8 * 1 / 8);
}

TEST(RateLimitedStorageTest, WrappersNamingOneFileShareOneBudget) {
  // Two wrappers, each with its own mapping of the file, as two processes
  // of one node have: 4 MiB read in all at 8 MiB/s take half a second,
  // not the quarter each would take alone.
  constexpr double kRate = 8 << 20;
  const std::string file =
      ::testing::TempDir() + "rate-limited-budget-" + std::to_string(getpid());
  std::unique_ptr<Storage> target = OpenStorage(Name()).value();
  const std::string two(2 << 20, 's');
  ASSERT_TRUE(target->PutString("a", two).ok());
  const std::string url = target->url();
  std::vector<std::unique_ptr<Storage>> paced;
  for (int i = 0; i < 2; ++i) {
    auto s = NewRateLimitedStorage(
        i == 0 ? std::move(target) : OpenStorage(url).value(),
        RateLimit{
            .bytes_per_second = kRate, .reads = true, .shared_file = file});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    paced.push_back(std::move(*s));
  }
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      std::string got(two.size(), '\0');
      EXPECT_TRUE(paced[i]->ReadRange("a", 0, Bytes(got)).ok());
      EXPECT_EQ(got, two);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_GE(Since(t0), 0.8 * 4 / 8);
  // A write through one takes its share of the budget that a read through
  // the other then waits for.
  const auto t1 = Clock::now();
  EXPECT_TRUE(paced[0]->PutString("b", two).ok());
  std::string got(two.size(), '\0');
  EXPECT_TRUE(paced[1]->ReadRange("a", 0, Bytes(got)).ok());
  EXPECT_GE(Since(t1), 0.8 * 4 / 8);
  paced.clear();
  ::unlink(file.c_str());
}

TEST(RateLimitedStorageTest, AnUnopenableBudgetFileFailsTheWrapper) {
  auto s = NewRateLimitedStorage(
      OpenStorage(Name()).value(),
      RateLimit{.bytes_per_second = 1e6,
                .reads = true,
                .shared_file = "/nonexistent-dir/budget"});
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace ckpt
