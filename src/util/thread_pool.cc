#include "util/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
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
  // The caller waits for the indexes, not for its helpers: a helper still
  // queued behind other callers' work (one pool shared by several ranks'
  // threads) finds nothing left when it runs, and the caller does not wait
  // for it to be scheduled. A helper that runs late touches only `shared`,
  // never `fn`.
  struct Shared {
    std::atomic<size_t> next{0};
    std::atomic<size_t> finished{0};  // indexes run, or skipped after a failure
    std::atomic<size_t> lowest_failed{SIZE_MAX};  // first_failed, unlocked
    Mutex mu;
    CondVar done;  // finished reached n
    size_t first_failed GUARDED_BY(mu) = SIZE_MAX;
    Status error GUARDED_BY(mu);
  };
  auto shared = std::make_shared<Shared>();
  auto work = [shared, n, &fn] {
    for (;;) {
      const size_t i = shared->next.fetch_add(1);
      if (i >= n) return;
      // Once a call has failed no later index is started (a skipped one
      // still counts as finished); an earlier one still runs, and may fail
      // with the error returned.
      if (i < shared->lowest_failed.load()) {
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
            shared->lowest_failed = i;
            shared->error = std::move(s);
          }
        }
      }
      if (shared->finished.fetch_add(1) + 1 == n) {
        MutexLock lock(&shared->mu);
        shared->done.SignalAll();
      }
    }
  };
  for (int h = 0; h < helpers; ++h) pool->Submit(work);
  work();
  MutexLock lock(&shared->mu);
  while (shared->finished.load() < n) shared->done.Wait(&shared->mu);
  return shared->error;
}

}  // namespace ckpt
