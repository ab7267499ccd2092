// CheckpointManager::Impl: the state the protocols share, and the protocols'
// entry points. Each protocol lives in its own file, which opens with the
// protocol in numbered steps:
//
//   save.cc        the save protocol on every rank (decide, plan, write,
//                  gather), full and incremental
//   commit.cc      the coordinator's commit and what follows it
//   async_save.cc  SaveAsync: staging, the background save, SaveHandle
//   load.cc        Load, LoadAll, LoadRankLocal
//   inspect.cc     Latest, List, Describe
//   verify.cc      Verify
//   delete.cc      Delete and delete --force (rewriting dependants)
//   gc.cc          retention and dead attempts
//   lease.cc       who owns the root for writing (RootLease)
//   manifests.cc   the committed manifests of the root (ManifestStore)
//   messages.cc    the save's and the load's messages between ranks
//                  (the tiers' and the runner's: tier_messages.cc)
//   manager.cc     the public facade: options, locking, no exception escapes
//
// Threads: the facade holds mu_ around every call after waiting until no
// background save is in flight (WaitIdle), and a background save holds the
// manager busy_ instead. Whoever has that turn owns the protocol state below
// mu_'s members (communicator, manifest cache, staging, I/O pool): clang's
// analysis checks mu_ and what it guards; the turn passing to the background
// thread is beyond it, so that state is owned by the turn's holder by
// convention, stated here.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "checkpoint/catalog_record.h"
#include "checkpoint/manifests.h"
#include "checkpoint/messages.h"
#include "ckpt/checkpoint_manager.h"
#include "data/planner.h"
#include "data/reader.h"
#include "data/viewed_reads.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "lease/lease.h"
#include "staging/device_copy.h"
#include "staging/device_pipeline.h"
#include "staging/staging.h"
#include "util/mutex.h"
#include "util/parallel_copy.h"
#include "util/thread_annotations.h"
#include "util/thread_pool.h"

namespace ckpt {

namespace internal {
// The outcome of one asynchronous save, shared by its handle and the thread
// that runs it (async_save.cc).
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

using format::NewAttemptId;

// The facts of a manifest a caller sees.
CheckpointInfo InfoFromManifest(const format::Manifest& m);

// Whether `key` names a temporary object the storage's backend may leave
// behind (a crashed write); with `target`, a temporary of that key only.
bool IsTemporaryOf(const Storage& storage, std::string_view key,
                   std::optional<std::string_view> target = std::nullopt);

// Runs `f`, turning an escaping exception into an error: no exception crosses
// the library boundary.
template <typename F>
auto Guard(std::string_view op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return IOError(std::string(op) + ": out of memory");
  } catch (const std::exception& e) {
    return IOError(std::string(op) + ": " + e.what());
  }
}

// A load read and checked, before it changes the caller's state.
struct StagedLoad {
  std::shared_ptr<const format::Manifest> manifest;
  std::vector<CopyJob> to_host;  // staging memory -> host tensors
  const CudaDriver* cuda = nullptr;
  std::vector<DeviceCopy> to_devices;  // staging memory -> device tensors
  std::vector<std::pair<std::string, std::string>> blobs;     // name, bytes
  std::vector<std::pair<std::string, std::string>> metadata;  // name, JSON
  // Streaming: the host tensors read straight into place (name, bytes),
  // changed once the reads began.
  std::vector<std::pair<std::string, uint64_t>> written;
  // Transactional from a storage with object views: the host tensors'
  // boxes, already checked in place, to copy into their buffers.
  std::shared_ptr<ViewedReads> viewed;
  std::vector<BoxRead> copies;
};

class CheckpointManager::Impl {
 public:
  Impl(std::unique_ptr<Storage> storage, Options options);
  ~Impl();  // waits for the save in flight

  Storage& storage() { return *storage_; }
  const Options& options() const { return options_; }
  Communicator& comm() { return *options_.communicator; }
  Mutex& mu() RETURN_CAPABILITY(mu_) { return mu_; }
  // What this manager tells its catalog; a tiered manager's local-tier rows
  // join the same batches (tier_catalog.cc).
  CatalogRecorder& catalog_recorder() { return catalog_; }
  // The root's ownership (lease.h): taken by the coordinator before it
  // writes, checked before each commit.
  RootLease& lease() { return *lease_; }
  // Runs `f` holding the root's lease. A manager that has not saved (a
  // tool's delete or gc) gives the lease back after, so that the next party
  // does not wait for it to expire; a job keeps it while it lives.
  template <typename F>
  auto Owning(std::string_view purpose, F&& f) -> decltype(f()) {
    bool taken = false;
    CKPT_RETURN_IF_ERROR(lease_->Acquire(purpose, &taken));
    auto result = f();
    if (taken && !saving_) lease_->Release();
    return result;
  }
  // Takes the root's lease as a save does, and keeps it while the manager
  // lives: a tiered manager's local-tier saves write for this job too
  // (tiered_manager.cc). They do not wait for another holder (`wait`).
  Status HoldLease(std::string_view purpose, bool wait);
  // FailedPrecondition when the lease held was taken over (lease.h).
  Status CheckLease() { return lease_->Check(); }

  // --- save.cc
  // `state_error`, when set, stands for the state (a rank whose state could
  // not be staged still takes part in the collectives, and fails them).
  Result<SaveResult> Save(int64_t step, const State& state,
                          const SaveOptions& save,
                          const Status& state_error = Status());

  // --- async_save.cc
  // Copies `state` into the staging memory (`need`: StagingBytes(state)) as
  // staged_, page-locking it first when a tensor is on a device; on an
  // error staged_ is empty. Only with the manager's turn (no asynchronous
  // save in flight).
  Status Stage(const State& state, uint64_t need, std::string_view op);
  // Waits (releasing mu_ meanwhile) until no asynchronous save is in flight.
  void WaitIdle() REQUIRES(mu_);
  // The error of the last background save that no Wait() collected, once
  // (then it is cleared), as the error of the call that is to save
  // `next_step`, which saves nothing.
  Status TakeAsyncError(int64_t next_step) REQUIRES(mu_);
  // SaveAsync, under mu_ (not yet waited for idle).
  void StartAsync(int64_t step, const State& state, const SaveOptions& save,
                  const std::shared_ptr<internal::SaveHandleState>& handle)
      REQUIRES(mu_);

  // --- load.cc
  // `damaged`, when given, is set on failure to whether the step that
  // failed is damaged (StageLoad; agreed across ranks).
  Result<CheckpointInfo> Load(std::optional<int64_t> step, State& state,
                              const LoadOptions& load, bool* damaged = nullptr);
  // The two halves of Load at one step, on this rank alone (no collective):
  // StageLoad reads every byte `state` needs from `step` and checks it,
  // changing nothing of `state` under LoadOptions::transactional (without,
  // host tensors are written at once); ApplyLoad then writes the rest into
  // `state`. A failed StageLoad sets `damaged` when the step itself is
  // damaged (DataLoss: a checksum, a missing or truncated object, a damaged
  // manifest or index; or a manifest gone since it was listed), not when
  // the state does not fit it or the storage failed.
  Status StageLoad(int64_t step, State& state, const LoadOptions& load,
                   StagedLoad& out, bool& damaged);
  Status ApplyLoad(StagedLoad& staged, State& state);
  Result<LoadedCheckpoint> LoadAll(std::optional<int64_t> step,
                                   const std::vector<std::string>& names);
  Result<LoadedCheckpoint> LoadRankLocal(std::optional<int64_t> step,
                                         std::string_view name);

  // --- inspect.cc
  Result<std::optional<int64_t>> Latest();
  // Every committed checkpoint, oldest first, each judged complete or not
  // (CheckpointInfo::incomplete) from one listing of the step objects.
  Result<std::vector<CheckpointInfo>> List();
  // The same without the judgement, so without that listing: for retention
  // and the catalog, which run after every save and do not need it.
  // The facts of the `listed` manifests that validate (the others skipped
  // with a warning); with `sizes`, each judged against them.
  std::vector<CheckpointInfo> Infos(
      const std::vector<std::pair<int64_t, ObjectInfo>>& listed,
      const std::map<std::string, uint64_t>* sizes);
  Result<CheckpointDescription> Describe(std::optional<int64_t> step);

  // --- verify.cc
  Result<VerifyReport> Verify(int64_t step, const ProgressFn& progress);

  // --- delete.cc
  // What one listing of the root says, for deleting many steps in one run
  // (a collection): with it each delete reads no listing of its own, so a
  // run over N steps costs one listing instead of N.
  struct DeleteRun {
    // Steps deleted in the same run, whose dependence on a step does not
    // hold it back.
    std::set<int64_t> going;
    // The steps that stay (not going, manifest valid) that depend on each
    // step, and every object they name.
    std::map<int64_t, std::vector<int64_t>> dependants;
    std::set<std::string> named_by_staying;
    // The listed objects of each step directory.
    std::map<int64_t, std::vector<ObjectInfo>> objects;
  };
  // `run`: the collection this delete is part of (null: a delete alone,
  // which lists what it needs and updates the LATEST hint itself).
  // `report` (never null) gets what it did, or would do in a dry run.
  Status Delete(int64_t step, const DeleteRun* run, DeleteReport* report,
                bool dry_run, bool rewrite_dependants = false);

  // The lease check before a delete or a collection removes anything:
  // FailedPrecondition ("taken over") naming `op` when the lease is no
  // longer this party's.
  Status CheckLeaseBeforeDeleting(const std::string& op);

  // --- gc.cc
  // `keep`: a step retention must not delete now (with what it depends on):
  // the one a save just committed, which may lie below the newest.
  Result<GcReport> GarbageCollect(const GcOptions& gc,
                                  std::optional<int64_t> keep = std::nullopt);

 private:
  // --- save.cc
  // Step 1 on the coordinator.
  SaveDecision DecideSave(int64_t step, const SaveOptions& save);
  // Step 2b on the coordinator: the lease, and the decision under it.
  SaveDecision ConfirmSave(int64_t step, const SaveOptions& save,
                           const SaveDecision& decided);
  // The parent an incremental save of `step` compares with (parent -1 for a
  // full save): IncrementalPolicy applied to the newest committed checkpoint
  // below `step`.
  SaveDecision DecideParent(int64_t step);
  // Step 3 of a full save on this rank: its pieces in one data object.
  WriteResult WriteFull(int64_t step, const std::string& attempt,
                        const State& state, const SavePlan& plan,
                        const std::vector<size_t>& mine);
  // The reads of this rank's device pieces of a full save, through bounce_.
  Result<std::unique_ptr<DeviceReadPipeline>> StartDeviceReads(
      const State& state, std::vector<DeviceReadPipeline::Segment> pieces);
  // Step 3 of an incremental save on this rank (collective: every rank
  // calls it): rows that reference the parent's objects name them in refs.
  WriteResult WriteIncremental(int64_t step, const std::string& attempt,
                               const State& state, const SaveOptions& save,
                               const SavePlan& plan,
                               const std::vector<size_t>& mine, int64_t parent);
  // Step 3b (indexed layout): writes this rank's index object from
  // `result`'s chunk rows, durably, and replaces the rows with its digest; a
  // failure becomes `result`'s status.
  void WriteIndex(int64_t step, const std::string& attempt,
                  const SavePlan& plan, WriteResult& result);
  // Removes this rank's object `key` (if any) of an attempt that can no
  // longer commit.
  void DiscardAttempt(const std::string& key);
  // Step 4: every rank's result (a single rank keeps its own).
  Result<std::vector<WriteResult>> GatherResults(WriteResult mine);
  // Whether `state` is the asynchronous save's staged copy, whose memory
  // (huge pages, large entries page-aligned) is written in place.
  bool IsStaged(const State& state) const { return &state == &staged_; }

  // --- commit.cc
  // Steps 6-7 on the coordinator; the outcome to broadcast.
  // `entries` is the plan's directory, started beside the writes.
  SaveOutcome Commit(int64_t step, const SaveOptions& save,
                     const SaveDecision& decision, const SavePlan& plan,
                     const std::vector<WriteResult>& results,
                     PendingDirectoryEntries& entries);
  // The fields every manifest version shares: job, step, epoch, time,
  // attempt, world size, chunk size, the user's metadata and metrics.
  format::Manifest Header(int64_t step, const SaveOptions& save,
                          const SaveDecision& decision,
                          const SavePlan& plan) const;
  Result<format::Manifest> BuildManifest(
      int64_t step, const SaveOptions& save, const SaveDecision& decision,
      const SavePlan& plan, const std::vector<WriteResult>& results);
  // Version 3: the directory from the plan and the ranks' index digests,
  // encoded into `directory` (and kept as `built`), and the commit record
  // with it (as format::WithDirectory gives it: objects and metadata
  // objects listed).
  Result<format::Manifest> BuildIndexed(
      int64_t step, const SaveOptions& save, const SaveDecision& decision,
      const SavePlan& plan, const std::vector<WriteResult>& results,
      PendingDirectoryEntries& entries, std::string& directory,
      std::shared_ptr<const format::Directory>& built);
  // Every object of an earlier step that `m` references is still there.
  Status CheckReferences(const format::Manifest& m);
  // Writes the manifest with create-if-absent: THE COMMIT.
  Status Publish(const format::Manifest& m, const std::string& bytes);
  // The fence again after Publish: withdraws the manifest if the lease was
  // lost meanwhile and an object it names is gone.
  Status RecheckAfterPublish(const format::Manifest& m);
  // Whether a failed Publish of `step` may still have left its manifest.
  bool MayHaveCommitted(int64_t step, const Status& failure);
  // After the commit: catalog, LATEST, retention. Failures only warn.
  // `info` is InfoFromManifest(m), which the outcome carries too; `dir` is
  // a version 3 commit's directory (null for versions 1 and 2).
  std::vector<int64_t> AfterCommit(
      format::Manifest m, const std::string& bytes, const CheckpointInfo& info,
      std::shared_ptr<const format::Directory> dir);

  // --- load.cc
  // The asked-for step, or the newest complete one by a listing (as
  // Latest); agreed across ranks.
  Result<int64_t> ResolveStep(std::optional<int64_t> step);
  // The steps to try: the asked-for one, or every committed one newest
  // first; agreed across ranks.
  Result<std::vector<int64_t>> StepsToTry(std::optional<int64_t> step);
  // Tries `attempt` (this rank's part of loading one step, which sets
  // `damaged` as StageLoad does) at each step of StepsToTry until every
  // rank succeeds at the same one, which it returns: every rank agrees
  // after each attempt, a damaged step is skipped (with a warning) only on
  // a resume, and any other failure fails every rank at once. Without
  // `agree_explicit`, an explicit step is this rank's alone (no
  // collective: LoadAll fills a State of its own, which needs no
  // agreement, and may be called by one rank).
  Result<int64_t> FirstStepThatLoads(
      std::optional<int64_t> step,
      const std::function<Status(int64_t, bool& damaged)>& attempt,
      bool* damaged = nullptr, bool agree_explicit = true);
  // Step `step`'s manifest with at least the pieces that meet `state`'s
  // boxes.
  Result<std::shared_ptr<const format::Manifest>> ReadFor(int64_t step,
                                                          const State& state);

  // The records of `state`'s entries, once every check that needs no data
  // has passed.
  Result<std::vector<const format::EntryRecord*>> MatchEntries(
      const format::Manifest& m, const State& state, const LoadOptions& load,
      const std::string& op);
  // Checks that the objects `m` names for `entries` exist with the recorded
  // sizes, before a single byte is read into the caller's buffers.
  Status CheckObjects(const format::Manifest& m,
                      const std::vector<const format::EntryRecord*>& entries);
  // Reads `records` into `out.state` under the names `names`.
  Status ReadInto(const format::Manifest& m,
                  const std::vector<const format::EntryRecord*>& records,
                  const std::vector<std::string>& names, LoadedCheckpoint& out);
  // The pool that reads (and writes) beside the calling thread; null when
  // Options::io_threads is 1.
  ThreadPool* IoPool();
  // Appends `read`, cut into slabs for the pool, to `reads`.
  void AddSlabs(BoxRead read, std::vector<BoxRead>& reads) const;

  // --- delete.cc
  // Copies the chunks of `dependant` that lie in objects of `step` into a new
  // object of its own and rewrites its manifest, so `step` can go; returns
  // the bytes copied.
  Result<uint64_t> RewriteDependant(int64_t dependant, int64_t step);
  // The bytes RewriteDependant would copy, read from the manifest alone.
  Result<uint64_t> BytesToRewrite(int64_t dependant, int64_t step);

  std::string Where() const { return storage_->url(); }

  std::unique_ptr<Storage> storage_;
  Options options_;
  // After storage_, so released before the storage goes.
  std::unique_ptr<RootLease> lease_;
  std::unique_ptr<Communicator> local_;
  Mutex mu_;  // serializes the public calls
  ManifestStore manifests_;
  // What this manager tells options_.catalog (catalog_record.h).
  CatalogRecorder catalog_{options_.catalog, *storage_,
                           [this] { return ListCommittedApart(*storage_); }};
  // Asynchronous save. The staged state is the background thread's while
  // busy_. The staging memory is also where a Save of device tensors stages
  // and a Load of them reads, both with the manager's turn.
  CondVar idle_;  // signalled when busy_ turns false
  // Set by the background thread while it saves: the commit's catalog calls
  // are then made without the next call waiting for them.
  std::atomic<bool> in_background_{false};
  bool busy_ GUARDED_BY(mu_) = false;  // a background save is in flight
  // Of the last background save, not reported yet, and its handle (whose
  // Wait() may have reported it).
  Status async_error_ GUARDED_BY(mu_);
  std::shared_ptr<internal::SaveHandleState> async_failed_ GUARDED_BY(mu_);
  std::thread worker_ GUARDED_BY(mu_);  // the last background save's thread
  StagingArena staging_;
  // The page-locked blocks a full Save of device tensors reads through
  // (DeviceReadPipeline::kMemoryBytes), mapped and registered once.
  StagingArena bounce_;
  State staged_;
  std::unique_ptr<ThreadPool> io_pool_;  // made on first use
  // Whether this manager took the lease to save: then it keeps it.
  // Atomic: a tiered manager's background thread sets it (HoldLease).
  std::atomic<bool> saving_{false};
  // The step this manager's last successful Save committed; -1 for none.
  int64_t last_saved_step_ = -1;
  // For the commit record's timing: when the save in progress began on
  // this rank (steady clock, ms), and the caller's stall of the background
  // save in progress (its copy into staging memory).
  int64_t save_started_ms_ = 0;
  int64_t background_stall_ms_ = 0;
  static int64_t SteadyNowMs();
  format::SaveTimingRecord Timing(const std::vector<WriteResult>& results,
                                  int64_t commit_started_ms) const;
  // Emptied chunk rows for the next save to fill: those of the parent an
  // incremental save read (whose own index ManifestStore keeps until the
  // next save takes it as its parent). With 4 KiB chunks a 2 GiB state has
  // half a million rows (21 MB); fresh memory for them at every save cost
  // more than the rest of a small incremental save on a VM where every page
  // fault is a trip to the hypervisor (docs/benchmarks.md). Holds 40 bytes
  // per chunk between saves (1% of the data at 4 KiB chunks, 0.001% at
  // 4 MiB), beside the index kept.
  std::vector<std::vector<ChunkRow>> spare_rows_;
  // Rows for the `k`th piece this rank writes, empty, with room for `n`.
  std::vector<ChunkRow> TakeRows(size_t k, size_t n);
};

}  // namespace ckpt
