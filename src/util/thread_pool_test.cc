#include "util/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ckpt {
namespace {

// Records the threads that run tasks and how many run at once. Each task
// first waits (up to a deadline) until `expected` threads are in tasks
// together: only tasks that really run in parallel get past it at once.
class Concurrency {
 public:
  explicit Concurrency(size_t expected) : expected_(expected) {}

  void Enter() {
    std::unique_lock<std::mutex> lock(mu_);
    threads_.insert(std::this_thread::get_id());
    max_running_ = std::max(max_running_, ++running_);
    cv_.notify_all();
    cv_.wait_for(lock, std::chrono::seconds(10),
                 [&] { return threads_.size() >= expected_; });
  }
  void Leave() {
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
  }

  std::set<std::thread::id> threads() {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_;
  }
  int max_running() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_running_;
  }

 private:
  const size_t expected_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::thread::id> threads_;
  int running_ = 0;
  int max_running_ = 0;
};

// Parallelism 4 on a pool of 8: the calling thread and 3 of the pool's run
// the indices together, and never more than 4 at once.
TEST(ThreadPoolTest, RunsEveryIndexOnceAcrossThreads) {
  ThreadPool pool(8);
  std::vector<std::atomic<int>> seen(1000);
  Concurrency concurrency(4);
  Status s = ParallelFor(&pool, 4, seen.size(), [&](size_t i) {
    concurrency.Enter();
    seen[i]++;
    concurrency.Leave();
    return Status();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (auto& n : seen) EXPECT_EQ(n.load(), 1);
  const std::set<std::thread::id> threads = concurrency.threads();
  EXPECT_EQ(threads.size(), 4u);
  EXPECT_TRUE(threads.count(std::this_thread::get_id()))
      << "the calling thread ran no index";
  EXPECT_EQ(concurrency.max_running(), 4);
}

// An exception on one of the pool's threads becomes the call's error, as on
// the calling thread, instead of ending the process.
TEST(ThreadPoolTest, ExceptionsOnThePoolsThreadsBecomeErrors) {
  ThreadPool pool(2);
  Concurrency concurrency(3);
  const std::thread::id caller = std::this_thread::get_id();
  Status s = ParallelFor(&pool, 3, 3, [&](size_t i) -> Status {
    concurrency.Enter();
    concurrency.Leave();
    if (std::this_thread::get_id() != caller) {
      throw std::runtime_error("boom " + std::to_string(i));
    }
    return Status();
  });
  EXPECT_EQ(concurrency.threads().size(), 3u);
  EXPECT_EQ(s.code(), ErrorCode::kIOError);
  EXPECT_NE(s.message().find("boom"), std::string::npos) << s.ToString();
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

// A pool shared by several callers (the staging copy of every rank of a
// process) may be busy with another's work: a caller then runs every index
// itself and returns, without waiting for the pool to get to its helper.
TEST(ThreadPoolTest, ACallerDoesNotWaitForABusyPool) {
  std::mutex mu;
  std::condition_variable cv;
  bool busy = false, release = false;
  // Declared after what its task uses, so that it is destroyed (its worker
  // joined) before them: the task may still be waking up when the test ends.
  ThreadPool pool(1);
  pool.Submit([&] {
    std::unique_lock<std::mutex> lock(mu);
    busy = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return busy; });
  }
  std::atomic<int> ran{0};
  std::future<Status> call = std::async(std::launch::async, [&] {
    return ParallelFor(&pool, 2, 50, [&](size_t) {
      ++ran;
      return Status();
    });
  });
  const bool returned =
      call.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  EXPECT_TRUE(returned) << "ParallelFor waited for the busy pool";
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_TRUE(call.get().ok());
  EXPECT_EQ(ran.load(), 50);
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
