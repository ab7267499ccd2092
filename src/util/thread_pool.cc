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
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_.SignalAll();
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::Submit(std::function<void()> task) {
  {
    MutexLock lock(&mu_);
    tasks_.push_back(std::move(task));
  }
  work_.Signal();
}

void ThreadPool::Run() {
  for (;;) {
    std::function<void()> task;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && tasks_.empty()) work_.Wait(&mu_);
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

Status ParallelFor(ThreadPool* pool, int parallelism, size_t n,
                   const std::function<Status(size_t)>& fn) {
  int helpers = 0;
  if (pool != nullptr) {
    helpers = static_cast<int>(std::min<size_t>(
        {static_cast<size_t>(std::max(parallelism - 1, 0)),
         static_cast<size_t>(pool->size()), n > 0 ? n - 1 : 0}));
  }
  struct Shared {
    explicit Shared(int helpers) : running(helpers) {}
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    Mutex mu;
    CondVar done;                // running reached 0
    int running GUARDED_BY(mu);  // helpers not yet finished
    size_t first_failed GUARDED_BY(mu) = SIZE_MAX;
    Status error GUARDED_BY(mu);
  };
  auto shared = std::make_shared<Shared>(helpers);
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
        MutexLock lock(&shared->mu);
        if (i < shared->first_failed) {
          shared->first_failed = i;
          shared->error = std::move(s);
        }
        shared->failed = true;
      }
    }
  };
  for (int h = 0; h < helpers; ++h) {
    pool->Submit([shared, work] {
      work();
      MutexLock lock(&shared->mu);
      if (--shared->running == 0) shared->done.SignalAll();
    });
  }
  work();
  MutexLock lock(&shared->mu);
  while (shared->running > 0) shared->done.Wait(&shared->mu);
  return shared->error;
}

}  // namespace ckpt
