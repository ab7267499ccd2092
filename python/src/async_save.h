// A Save running on a background thread, started by save_async.
//
// The C++ library has no asynchronous save yet, so the binding runs the
// ordinary synchronous Save on a std::thread of its own. The State borrows
// the caller's arrays, so the caller must not modify them until Wait returns:
// the bytes written are whatever the arrays hold when the thread reads them.
// The handle keeps references to the arrays until then, so they cannot be
// freed under the thread.
//
// Saves of one manager commit in the order they were started: each thread
// first waits for the previous one (`after`).
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "ckpt/checkpoint_manager.h"
#include "entries.h"

namespace ckpt::python {

class AsyncSave {
 public:
  // Starts the thread. Called with the GIL held.
  AsyncSave(std::shared_ptr<CheckpointManager> manager, int64_t step,
            BorrowedState state, SaveOptions options,
            std::shared_future<void> after);
  // Waits for the thread (releasing the GIL); a dropped handle never leaves
  // a thread reading freed arrays.
  ~AsyncSave();
  AsyncSave(const AsyncSave&) = delete;
  AsyncSave& operator=(const AsyncSave&) = delete;

  // Blocks until the save has ended (without holding the GIL), drops the
  // references to the arrays and returns the result, or throws StatusError.
  // May be called again; it returns the same result.
  SaveResult Wait();
  // True once the save has ended (Wait will not block).
  bool Done() const { return done_.load(std::memory_order_acquire); }
  int64_t step() const { return step_; }
  // Becomes ready when the save has ended, successfully or not.
  std::shared_future<void> finished() const { return finished_; }

 private:
  void Join();

  std::shared_ptr<CheckpointManager> manager_;
  const int64_t step_;
  BorrowedState state_;
  const SaveOptions options_;
  std::shared_future<void> after_;
  std::optional<Result<SaveResult>> result_;
  std::atomic<bool> done_{false};
  std::promise<void> finished_promise_;
  std::shared_future<void> finished_;
  std::mutex join_mu_;  // two Python threads may Wait at once
  std::thread thread_;  // last: starts once every other member exists
};

}  // namespace ckpt::python
