// Asynchronous save (SaveAsync):
//
//   1. On the caller's thread, wait until no save is in flight (under
//      AsyncSavePolicy::kSkip a single process returns "skipped" instead),
//      join the last background thread and report its error, if any, once.
//   2. Copy the state into the reused staging memory (staging.h: huge pages,
//      large entries page-aligned; device tensors copied by the CUDA driver
//      into it, page-locked, after the caller's stream). A state above
//      async_staging_bytes is saved synchronously instead; a state that cannot
//      be staged still goes on, carrying its error, so every rank fails the
//      collectives together.
//      With SaveOptions::stage_in_background the copy is step 4's first
//      part instead, on the background thread, and the handle's WaitStaged()
//      tells the caller when it may change its tensors.
//   3. Mark the manager busy; the caller returns and may change its tensors
//      (with stage_in_background: once WaitStaged() returns).
//   4. A background thread runs the save protocol (save.cc) on the staged
//      copy; with many ranks its collectives run on that thread. The handle
//      gets the result first, then the manager turns idle.
//
// While the manager is busy every public call waits (the busy flag is a lock
// held across threads), so the communicator and the manifest cache are used
// by one thread at a time and every rank sees the same order of collectives.
// A background error is reported once: by the handle's Wait(), or, where
// nobody called Wait() before the next Save or SaveAsync, by that call,
// which then saves nothing and says so. On many ranks that call still takes
// part in the save's collectives, carrying the error, so that the ranks that
// did collect it (and go on to save) fail the same save with it instead of
// waiting for this one.
#include "checkpoint/manager_impl.h"

namespace ckpt {
namespace {

constexpr std::string_view kStage = "asynchronous save: stage the state";

}  // namespace

void internal::SaveHandleState::Finish(Result<SaveResult> r) {
  {
    MutexLock lock(&mu);
    // A save that ends without staging (refused, saved synchronously) has
    // nothing left to read of the caller's state either.
    if (!staged.has_value()) staged.emplace(r.ok() ? Status() : r.status());
    result.emplace(std::move(r));
  }
  done.SignalAll();
}

void internal::SaveHandleState::Staged(Status staging) {
  {
    MutexLock lock(&mu);
    staged.emplace(std::move(staging));
  }
  done.SignalAll();
}

int64_t SaveHandle::step() const { return shared_ ? shared_->step : -1; }

bool SaveHandle::Done() const {
  if (!shared_) return true;
  MutexLock lock(&shared_->mu);
  return shared_->result.has_value();
}

Status SaveHandle::WaitStaged() const {
  if (!shared_) {
    return FailedPreconditionError(
        "wait for staging: the handle belongs to no save");
  }
  MutexLock lock(&shared_->mu);
  while (!shared_->staged.has_value()) shared_->done.Wait(&shared_->mu);
  return *shared_->staged;
}

Result<SaveResult> SaveHandle::Wait() const {
  if (!shared_) {
    return FailedPreconditionError("wait: the handle belongs to no save");
  }
  MutexLock lock(&shared_->mu);
  while (!shared_->result.has_value()) shared_->done.Wait(&shared_->mu);
  if (!shared_->result->ok()) shared_->collected = true;
  return *shared_->result;
}

CheckpointManager::Impl::~Impl() {
  MutexLock lock(&mu_);
  WaitIdle();
  // Once idle the thread no longer needs mu_: joining under it is safe.
  if (worker_.joinable()) worker_.join();
}

void CheckpointManager::Impl::WaitIdle() {
  while (busy_) idle_.Wait(&mu_);
}

Status CheckpointManager::Impl::TakeAsyncError(int64_t next_step) {
  const Status error = std::exchange(async_error_, Status());
  const auto failed = std::exchange(async_failed_, nullptr);
  if (error.ok()) return error;
  if (failed != nullptr) {
    MutexLock lock(&failed->mu);
    if (failed->collected) return Status();
  }
  return Status(error.code(), error.message() +
                                  "; no Wait() collected that error, so it is "
                                  "reported here and step " +
                                  std::to_string(next_step) +
                                  " was not saved (save it again)");
}

Status CheckpointManager::Impl::Stage(const State& state, uint64_t need,
                                      std::string_view op) {
  staged_ = State();
  Status staged = state.status();
  if (staged.ok()) {
    staged = Guard(op, [&]() -> Status {
      CKPT_ASSIGN_OR_RETURN(std::span<std::byte> memory,
                            staging_.Reserve(need));
      if (const Entry* e = FirstDeviceTensor(state)) {
        CKPT_ASSIGN_OR_RETURN(CudaDriver * cuda, DriverFor(*e, op));
        CKPT_RETURN_IF_ERROR(
            staging_.Register(*cuda, e->tensor.location.device(), op));
      }
      return StageState(state, memory, staged_);
    });
  }
  if (!staged.ok()) staged_ = State();
  return staged;
}

void CheckpointManager::Impl::StartAsync(
    int64_t step, const State& state, const SaveOptions& save,
    const std::shared_ptr<internal::SaveHandleState>& handle) {
  // 1. Wait for the save in flight, or skip.
  if (busy_ && options_.async_policy == AsyncSavePolicy::kSkip &&
      comm().size() == 1) {
    SaveResult skipped;
    skipped.skipped = true;
    handle->Finish(std::move(skipped));
    return;
  }
  WaitIdle();
  // The thread has reported its result and is ending; join it so that it
  // can be replaced.
  if (worker_.joinable()) worker_.join();
  if (Status s = TakeAsyncError(step); !s.ok()) {
    if (comm().size() == 1) {
      handle->Finish(std::move(s));
    } else {
      handle->Finish(Guard("save", [&] { return Save(step, state, save, s); }));
    }
    return;
  }
  // 2. Stage.
  const uint64_t need = StagingBytes(state);
  if (options_.async_staging_bytes > 0 && need > options_.async_staging_bytes) {
    handle->Finish(Guard("save", [&] { return Save(step, state, save); }));
    return;
  }
  Status staged;
  int64_t stall_ms = 0;
  if (!save.stage_in_background) {
    const int64_t started = SteadyNowMs();
    staged = Stage(state, need, kStage);
    stall_ms = SteadyNowMs() - started;
    handle->Staged(staged);
  }
  // 3. Busy; 4. save in the background (staging first, if it is to run
  // there: the caller keeps `state` alive until WaitStaged returns).
  busy_ = true;
  worker_ =
      std::thread([this, step, save, staged, handle, need, stall_ms, &state] {
        Status staging = staged;
        background_stall_ms_ = stall_ms;
        if (save.stage_in_background) {
          staging = Stage(state, need, kStage);
          handle->Staged(staging);
        }
        in_background_ = true;
        Result<SaveResult> r =
            Guard("save", [&] { return Save(step, staged_, save, staging); });
        in_background_ = false;
        {
          MutexLock l(&mu_);
          if (!r.ok()) {
            async_error_ =
                r.status().WithContext("the asynchronous save of step " +
                                       std::to_string(step) + " failed");
            async_failed_ = handle;
          }
        }
        // The handle is done before any waiting call runs, so a call that
        // waited for this save finds it Done().
        handle->Finish(std::move(r));
        {
          MutexLock l(&mu_);
          busy_ = false;
        }
        idle_.SignalAll();
      });
}

}  // namespace ckpt
