#include "util/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>

namespace ckpt {

ThreadPool::ThreadPool(int threads) {
  for (int i = 0; i < std::max(threads, 0); ++i) {
    threads_.emplace_back([this] { Run(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::Submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void ThreadPool::Run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

Status ParallelFor(ThreadPool* pool, int parallelism, size_t n,
                   const std::function<Status(size_t)>& fn) {
  struct Shared {
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex mu;
    std::condition_variable done;
    int running = 0;                 // guarded by mu
    size_t first_failed = SIZE_MAX;  // guarded by mu
    Status error;                    // guarded by mu
  };
  auto shared = std::make_shared<Shared>();
  auto work = [shared, n, &fn] {
    for (;;) {
      if (shared->failed.load(std::memory_order_relaxed)) return;
      const size_t i = shared->next.fetch_add(1);
      if (i >= n) return;
      Status s;
      try {
        s = fn(i);
      } catch (const std::exception& e) {
        s = IOError(std::string("parallel task: ") + e.what());
      }
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(shared->mu);
        if (i < shared->first_failed) {
          shared->first_failed = i;
          shared->error = std::move(s);
        }
        shared->failed = true;
      }
    }
  };
  int helpers = 0;
  if (pool != nullptr) {
    helpers = static_cast<int>(std::min<size_t>(
        {static_cast<size_t>(std::max(parallelism - 1, 0)),
         static_cast<size_t>(pool->size()), n > 0 ? n - 1 : 0}));
  }
  shared->running = helpers;
  for (int h = 0; h < helpers; ++h) {
    pool->Submit([shared, work] {
      work();
      std::lock_guard<std::mutex> lock(shared->mu);
      if (--shared->running == 0) shared->done.notify_all();
    });
  }
  work();
  std::unique_lock<std::mutex> lock(shared->mu);
  shared->done.wait(lock, [&] { return shared->running == 0; });
  return shared->error;
}

}  // namespace ckpt
