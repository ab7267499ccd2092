// A mutex that clang's thread-safety analysis understands, a scoped lock for
// it, and a condition variable that waits on it. std::mutex would serve at run
// time, but libstdc++ does not annotate it, so the analysis could not see it
// taken (util/thread_annotations.h).
//
//   Mutex mu_;
//   int pending_ GUARDED_BY(mu_) = 0;
//   CondVar idle_;
//
//   MutexLock lock(&mu_);
//   while (pending_ > 0) idle_.Wait(&mu_);
//
// Thread-safe, as mutexes are; not recursive.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "util/thread_annotations.h"

namespace ckpt {

class CAPABILITY("mutex") Mutex {
 public:
  // constexpr, so that a Mutex at namespace scope is ready before any
  // dynamic initializer runs.
  constexpr Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis that this thread holds the mutex where it cannot
  // follow the locking itself; checks nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` from construction to the end of the scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Waits, with a Mutex held, until another thread signals. A wait may also
// return spuriously, so wait in a loop on the condition.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Releases `mu` while waiting and holds it again on return.
  void Wait(Mutex* mu) REQUIRES(mu) {
    // The lock is the caller's: adopt it for the wait and hand it back.
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // As Wait, but returns after `timeout` at the latest.
  void WaitFor(Mutex* mu, std::chrono::milliseconds timeout) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait_for(lock, timeout);
    lock.release();
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace ckpt
