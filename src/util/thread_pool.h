// A small fixed pool of threads for I/O: reading chunks into the caller's
// buffers and writing data-object blocks while the next ones are prepared.
//
// Thread-safe. The destructor finishes every task already submitted.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "ckpt/status.h"

namespace ckpt {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Submit(std::function<void()> task);
  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::vector<std::thread> threads_;
};

// Runs fn(0) ... fn(n - 1) on up to `parallelism` threads: the calling one
// and the pool's (null: the calling thread alone). Once a call fails no new
// index is started; returns the error of the lowest failed index, so the
// result does not depend on timing. An exception escaping fn becomes an
// IOError.
Status ParallelFor(ThreadPool* pool, int parallelism, size_t n,
                   const std::function<Status(size_t)>& fn);

}  // namespace ckpt
