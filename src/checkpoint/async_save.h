// SaveAsync (async_save.cc): staging, the background save, SaveHandle.
// Each call needs the manager's turn (root_context.h): under mu, or as the
// background save.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "checkpoint/root_context.h"
#include "util/mutex.h"
#include "util/thread_annotations.h"

namespace ckpt {

namespace internal {
// The outcome of one asynchronous save, shared by its handle and the thread
// that runs it.
struct SaveHandleState {
  explicit SaveHandleState(int64_t step) : step(step) {}
  void Finish(Result<SaveResult> r) EXCLUDES(mu);

  // The state is in the staging memory (or was never to be): WaitStaged
  // returns `staging`.
  void Staged(Status staging) EXCLUDES(mu);

  const int64_t step;
  Mutex mu;
  CondVar done;  // signalled when result or staged is set
  std::optional<Result<SaveResult>> result GUARDED_BY(mu);
  std::optional<Status> staged GUARDED_BY(mu);
  // Wait() has handed the error to the caller: the next save need not
  // report it again.
  bool collected GUARDED_BY(mu) = false;
};
}  // namespace internal

// Copies `state` into the staging memory (`need`: StagingBytes(state)) as
// root.staged, page-locking it first when a tensor is on a device; on an
// error root.staged is empty. Only with the manager's turn (no asynchronous
// save in flight).
Status Stage(RootContext& root, const State& state, uint64_t need,
             std::string_view op);
// The error of the last background save that no Wait() collected, once
// (then it is cleared), as the error of the call that is to save
// `next_step`, which saves nothing. A SaveAsync that fails with it hands
// it on (KeepAsyncError) until a Wait() collects it.
Status TakeAsyncError(RootContext& root, int64_t next_step) REQUIRES(root.mu);
// SaveAsync, under mu (not yet waited for idle).
void StartAsync(RootContext& root, int64_t step, const State& state,
                const SaveOptions& save,
                const std::shared_ptr<internal::SaveHandleState>& handle)
    REQUIRES(root.mu);

}  // namespace ckpt
