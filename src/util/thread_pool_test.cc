#include "util/thread_pool.h"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ckpt {
namespace {

TEST(ThreadPoolTest, RunsEveryIndexOnceAcrossThreads) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> seen(1000);
  std::mutex mu;
  std::set<std::thread::id> threads;
  Status s = ParallelFor(&pool, 4, seen.size(), [&](size_t i) {
    seen[i]++;
    std::lock_guard<std::mutex> lock(mu);
    threads.insert(std::this_thread::get_id());
    return Status();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (auto& n : seen) EXPECT_EQ(n.load(), 1);
  EXPECT_GE(threads.size(), 1u);
}

TEST(ThreadPoolTest, ReturnsTheErrorOfTheLowestFailedIndex) {
  ThreadPool pool(2);
  for (int round = 0; round < 20; ++round) {
    // Every index fails; index 0 is always started, so its error wins.
    Status s = ParallelFor(&pool, 3, 100, [&](size_t i) {
      return IOError("index " + std::to_string(i));
    });
    EXPECT_EQ(s.message(), "index 0");
  }
  Status one = ParallelFor(&pool, 3, 10, [&](size_t i) {
    return i == 3 ? IOError("three") : Status();
  });
  EXPECT_EQ(one.message(), "three");
}

TEST(ThreadPoolTest, WorksWithoutAPoolAndTurnsExceptionsIntoErrors) {
  int sum = 0;
  ASSERT_TRUE(ParallelFor(nullptr, 4, 10, [&](size_t i) {
                sum += static_cast<int>(i);
                return Status();
              }).ok());
  EXPECT_EQ(sum, 45);
  Status s = ParallelFor(nullptr, 1, 2, [&](size_t) -> Status {
    throw std::runtime_error("boom");
  });
  EXPECT_EQ(s.code(), ErrorCode::kIOError);
  EXPECT_NE(s.message().find("boom"), std::string::npos);
  EXPECT_TRUE(ParallelFor(nullptr, 4, 0, [&](size_t) {
                return IOError("never called");
              }).ok());
}

TEST(ThreadPoolTest, DestructorFinishesSubmittedTasks) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(2);
    for (int i = 0; i < 50; ++i) pool.Submit([&] { ran++; });
  }
  EXPECT_EQ(ran.load(), 50);
}

}  // namespace
}  // namespace ckpt
