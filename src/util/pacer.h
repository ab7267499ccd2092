// Paces a stream of bytes to a rate, shared by every thread that uses one
// Pacer: what keeps background work (a durable tier's writes, the local
// tier's replication) within a budget while training goes on.
//
// Pacing is by reservation: Wait(n) takes the interval [start, start + n /
// rate) of a shared timeline, start being the later of now and the end of
// the last reservation, and sleeps until `start`. So the bytes let through by
// time t never exceed rate × t plus one call's, and callers on many threads
// share the budget in the order they asked.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>

namespace ckpt {

class Pacer {
 public:
  // `bytes_per_second` > 0.
  explicit Pacer(double bytes_per_second) : rate_(bytes_per_second) {}

  void Wait(uint64_t bytes) {
    Clock::time_point start;
    {
      std::lock_guard<std::mutex> lock(mu_);
      start = std::max(Clock::now(), next_);
      next_ = start + std::chrono::duration_cast<Clock::duration>(
                          std::chrono::duration<double>(bytes / rate_));
    }
    std::this_thread::sleep_until(start);
  }

 private:
  using Clock = std::chrono::steady_clock;
  const double rate_;
  std::mutex mu_;
  Clock::time_point next_{};
};

}  // namespace ckpt
