// A small fixed pool of threads for I/O: reading chunks into the caller's
// buffers and writing data-object blocks while the next ones are prepared.
//
// Thread-safe: Submit and ParallelFor may be called from any thread. The
// destructor finishes every task already submitted.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "ckpt/status.h"
#include "util/mutex.h"

namespace ckpt {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Submit(std::function<void()> task) EXCLUDES(mu_);
  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void Run() EXCLUDES(mu_);

  Mutex mu_;
  CondVar work_;  // a task was submitted, or the pool is stopping
  std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// Runs fn(0) ... fn(n - 1) on up to `parallelism` threads: the calling one
// and the pool's (null: the calling thread alone). Once a call fails no
// later index is started; returns the error of the lowest failed index.
// An exception escaping fn becomes an IOError. Returns once every index is
// done, without waiting for pool threads busy with other work to join in.
Status ParallelFor(ThreadPool* pool, int parallelism, size_t n,
                   const std::function<Status(size_t)>& fn);

}  // namespace ckpt
