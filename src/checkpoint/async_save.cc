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
#include "checkpoint/async_save.h"

#include "checkpoint/save.h"
#include "staging/device_copy.h"

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

RootContext::~RootContext() {
  MutexLock lock(&mu);
  WaitIdle();
  // Once idle the thread no longer needs mu: joining under it is safe.
  if (worker.joinable()) worker.join();
}

void RootContext::WaitIdle() {
  while (busy) idle.Wait(&mu);
}

Status TakeAsyncError(RootContext& root, int64_t next_step) {
  const Status error = std::exchange(root.async_error, Status());
  const auto failed = std::exchange(root.async_failed, nullptr);
  std::vector<int64_t> not_saved = std::exchange(root.async_not_saved, {});
  if (error.ok()) return error;
  if (failed != nullptr) {
    MutexLock lock(&failed->mu);
    if (failed->collected) return Status();
  }
  not_saved.push_back(next_step);
  std::string steps;
  for (size_t i = 0; i < not_saved.size(); ++i) {
    steps += (i == 0                      ? ""
              : i + 1 == not_saved.size() ? " and "
                                          : ", ") +
             std::to_string(not_saved[i]);
  }
  const bool one = not_saved.size() == 1;
  return Status(error.code(),
                error.message() +
                    "; no Wait() collected that error, so it is reported here "
                    "and step" +
                    (one ? " " : "s ") + steps + (one ? " was" : " were") +
                    " not saved (save " + (one ? "it" : "them") + " again)");
}

namespace {

// A SaveAsync that failed with the error TakeAsyncError handed it, at its
// start: that error is still nobody's until its handle's Wait() collects
// it, so the next save takes it again (naming this step too) rather than
// go ahead, and a job that never waits loses no step unseen (the next
// save, close(), or a wait() of the manager reports it).
void KeepAsyncError(RootContext& root, Status error, int64_t step,
                    std::vector<int64_t> not_saved,
                    const std::shared_ptr<internal::SaveHandleState>& handle)
    REQUIRES(root.mu) {
  not_saved.push_back(step);
  root.async_error = std::move(error);
  root.async_failed = handle;
  root.async_not_saved = std::move(not_saved);
}

}  // namespace

Status Stage(RootContext& root, const State& state, uint64_t need,
             std::string_view op) {
  root.staged = State();
  Status staged = state.status();
  if (staged.ok()) {
    staged = Guard(op, [&]() -> Status {
      CKPT_ASSIGN_OR_RETURN(std::span<std::byte> memory,
                            root.staging.Reserve(need));
      if (const Entry* e = FirstDeviceTensor(state)) {
        CKPT_ASSIGN_OR_RETURN(CudaDriver * cuda, DriverFor(*e, op));
        CKPT_RETURN_IF_ERROR(
            root.staging.Register(*cuda, e->tensor.location.device(), op));
      }
      return StageState(state, memory, root.staged);
    });
  }
  if (!staged.ok()) root.staged = State();
  return staged;
}

void StartAsync(RootContext& root, int64_t step, const State& state,
                const SaveOptions& save,
                const std::shared_ptr<internal::SaveHandleState>& handle) {
  // 1. Wait for the save in flight, or skip.
  if (root.busy && root.options.async_policy == AsyncSavePolicy::kSkip &&
      root.comm().size() == 1) {
    SaveResult skipped;
    skipped.skipped = true;
    handle->Finish(std::move(skipped));
    return;
  }
  root.WaitIdle();
  // The thread has reported its result and is ending; join it so that it
  // can be replaced.
  if (root.worker.joinable()) root.worker.join();
  const Status carried = root.async_error;
  const std::vector<int64_t> not_saved = root.async_not_saved;
  if (Status s = TakeAsyncError(root, step); !s.ok()) {
    if (root.comm().size() == 1) {
      handle->Finish(std::move(s));
      KeepAsyncError(root, carried, step, not_saved, handle);
    } else {
      // The other ranks fail this save with it too (the ranks that had
      // collected it in their background); this one hands it on as well.
      Result<SaveResult> r =
          Guard("save", [&] { return Saver(root).Save(step, state, save, s); });
      const bool failed = !r.ok();
      handle->Finish(std::move(r));
      if (failed) KeepAsyncError(root, carried, step, not_saved, handle);
    }
    return;
  }
  // 2. Stage.
  const uint64_t need = StagingBytes(state);
  if (root.options.async_staging_bytes > 0 &&
      need > root.options.async_staging_bytes) {
    handle->Finish(
        Guard("save", [&] { return Saver(root).Save(step, state, save); }));
    return;
  }
  Status staged;
  int64_t stall_ms = 0;
  if (!save.stage_in_background) {
    const int64_t started = RootContext::SteadyNowMs();
    staged = Stage(root, state, need, kStage);
    stall_ms = RootContext::SteadyNowMs() - started;
    handle->Staged(staged);
  }
  // 3. Busy; 4. save in the background (staging first, if it is to run
  // there: the caller keeps `state` alive until WaitStaged returns).
  root.busy = true;
  root.worker =
      std::thread([&root, step, save, staged, handle, need, stall_ms, &state] {
        Status staging = staged;
        root.background_stall_ms = stall_ms;
        if (save.stage_in_background) {
          staging = Stage(root, state, need, kStage);
          handle->Staged(staging);
        }
        root.in_background = true;
        Result<SaveResult> r = Guard("save", [&] {
          return Saver(root).Save(step, root.staged, save, staging);
        });
        root.in_background = false;
        {
          MutexLock l(&root.mu);
          if (!r.ok()) {
            root.async_error =
                r.status().WithContext("the asynchronous save of step " +
                                       std::to_string(step) + " failed");
            root.async_failed = handle;
          }
        }
        // The handle is done before any waiting call runs, so a call that
        // waited for this save finds it Done().
        handle->Finish(std::move(r));
        {
          MutexLock l(&root.mu);
          root.busy = false;
        }
        root.idle.SignalAll();
      });
}

}  // namespace ckpt
