// NewRateLimitedStorage: writes are paced to the rate (a lower bound on
// their time, which sleeping guarantees), bytes pass unchanged, reads and
// deletes are not held, and a rate of 0 is no wrapper at all.
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

}  // namespace
}  // namespace ckpt
