// RootContext: what every protocol of a manager shares (its root's storage,
// options, communicator, manifests, lease, catalog, staging memory and I/O
// pool). The manager (manager.cc) owns one; each protocol is an object or a
// function over it, in its own header, whose file opens with the protocol in
// numbered steps:
//
//   save.h        save.cc: the save protocol on every rank (decide, plan,
//                 write, gather), full and incremental
//   commit.h      commit.cc: the coordinator's commit and what follows it
//   async_save.h  async_save.cc: SaveAsync: staging, the background save,
//                 SaveHandle
//   load.h        load.cc: Load, LoadAll, LoadRankLocal
//   read_once.h   read_once.cc: a chunk several ranks load, read by one and
//                 sent to the others; read_once_exchange.h/.cc: how batches
//                 of chunks move; held_chunks.h/.cc: the memory a rank
//                 holds them in
//   inspect.h     inspect.cc: Latest, List, Describe
//   replace.h     replace.cc: whether a save replaces a committed step (one
//                 that does not load whole)
//   verify.h      verify.cc: Verify
//   delete.h      delete.cc: Delete and delete --force (rewriting dependants)
//   gc.h          gc.cc: retention and dead attempts
//   lease.cc      who owns the root for writing (RootLease)
//   manifests.cc  the committed manifests of the root (ManifestStore)
//   messages.cc   the save's and the load's messages between ranks
//                 (the tiers' and the runner's: tier_messages.cc)
//   manager.cc    the public facade: options, locking, no exception escapes
//
// Threads: the facade holds mu around every call after waiting until no
// background save is in flight (WaitIdle), and a background save holds the
// manager busy instead. Whoever has that turn owns the protocol state below
// mu's members (communicator, manifest cache, staging, I/O pool): clang's
// analysis checks mu and what it guards; the turn passing to the background
// thread is beyond it, so that state is owned by the turn's holder by
// convention, stated here.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "checkpoint/catalog_record.h"
#include "checkpoint/manifests.h"
#include "ckpt/checkpoint_manager.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "lease/lease.h"
#include "messages/messages.h"
#include "staging/staging.h"
#include "util/mutex.h"
#include "util/thread_annotations.h"
#include "util/thread_pool.h"

namespace ckpt {

namespace internal {
struct SaveHandleState;  // async_save.h
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

struct RootContext {
  RootContext(std::unique_ptr<Storage> storage, Options options);
  ~RootContext();  // waits for the save in flight
  RootContext(const RootContext&) = delete;
  RootContext& operator=(const RootContext&) = delete;

  Communicator& comm() { return *options.communicator; }
  std::string Where() const { return storage->url(); }

  // Waits (releasing mu meanwhile) until no asynchronous save is in flight.
  void WaitIdle() REQUIRES(mu);

  // Runs `f` holding the root's lease. A manager that has not saved (a
  // tool's delete or gc) gives the lease back after, so that the next party
  // does not wait for it to expire; a job keeps it while it lives.
  template <typename F>
  auto Owning(std::string_view purpose, F&& f) -> decltype(f()) {
    bool taken = false;
    CKPT_RETURN_IF_ERROR(lease->Acquire(purpose, &taken));
    auto result = f();
    if (taken && !saving) lease->Release();
    return result;
  }
  // Takes the root's lease as a save does, and keeps it while the manager
  // lives: a tiered manager's local-tier saves write for this job too
  // (tiered_manager.cc). They do not wait for another holder (`wait`).
  Status HoldLease(std::string_view purpose, bool wait);
  // FailedPrecondition when the lease held was taken over (lease.h).
  Status CheckLease() { return lease->Check(); }
  // The lease check before a delete or a collection removes anything:
  // FailedPrecondition ("taken over") naming `op` when the lease is no
  // longer this party's.
  Status CheckLeaseBeforeDeleting(const std::string& op);

  // The pool that reads (and writes) beside the calling thread; null when
  // Options::io_threads is 1.
  ThreadPool* IoPool();
  // Rows for the `k`th piece this rank writes, empty, with room for `n`.
  std::vector<ChunkRow> TakeRows(size_t k, size_t n);
  static int64_t SteadyNowMs();

  std::unique_ptr<Storage> storage;
  Options options;
  // After storage, so released before the storage goes. The root's
  // ownership (lease.h): taken by the coordinator before it writes, checked
  // before each commit.
  std::unique_ptr<RootLease> lease;
  std::unique_ptr<Communicator> local;
  Mutex mu;  // serializes the public calls
  ManifestStore manifests;
  // What this manager tells options.catalog (catalog_record.h); a tiered
  // manager's local-tier rows join the same batches (tier_catalog.cc).
  CatalogRecorder catalog{options.catalog, *storage,
                          [this] { return ListCommittedApart(*storage); }};
  // Asynchronous save (async_save.h). The staged state is the background
  // thread's while busy. The staging memory is also where a Save of device
  // tensors stages and a Load of them reads, both with the manager's turn.
  CondVar idle;  // signalled when busy turns false
  // Set by the background thread while it saves: the commit's catalog calls
  // are then made without the next call waiting for them.
  std::atomic<bool> in_background{false};
  bool busy GUARDED_BY(mu) = false;  // a background save is in flight
  // Of the last background save, not reported yet, and the handle that
  // holds it (whose Wait() may have reported it): the failed save's, or
  // that of a SaveAsync it failed since (async_not_saved, its steps), for
  // as long as no Wait() collects it.
  Status async_error GUARDED_BY(mu);
  std::shared_ptr<internal::SaveHandleState> async_failed GUARDED_BY(mu);
  std::vector<int64_t> async_not_saved GUARDED_BY(mu);
  std::thread worker GUARDED_BY(mu);  // the last background save's thread
  StagingArena staging;
  // The page-locked blocks a full Save of device tensors reads through
  // (DeviceReadPipeline::kMemoryBytes), mapped and registered once.
  StagingArena bounce;
  State staged;
  std::unique_ptr<ThreadPool> io_pool;  // made on first use
  // Whether this manager took the lease to save: then it keeps it.
  // Atomic: a tiered manager's background thread sets it (HoldLease).
  std::atomic<bool> saving{false};
  // The step this manager's last successful Save committed; -1 for none.
  int64_t last_saved_step = -1;
  // Warns that retention ranks by a metric no checkpoint has (`ranks`, from
  // RetentionRanks; nothing where it is ok): once a manager, not at every
  // save (gc.cc).
  void WarnUnranked(const Status& ranks);
  std::atomic<bool> warned_unranked{false};
  // The coordinator's map of the root while it is the root's only writer
  // and has seen all of it: every committed step that loads whole (its
  // manifest valid, its objects there), with its info. Filled by a
  // collection of the whole root made holding the lease (gc.cc), kept by
  // this manager's own commits; emptied (nullopt) by anything else that may
  // change the root behind it: the lease taken anew, a save that failed (it
  // may leave objects behind), a Delete, a collection that failed. While it
  // is known, a save's collection has nothing dead to find (every attempt
  // of the only writer committed or was discarded, and any failure empties
  // this map), retention decides from it, and an incremental save finds
  // its parent in it: none of them lists the root, so a save costs the
  // same in a root of 10,000 steps as in one of 100 (bench_root_growth).
  std::optional<std::map<int64_t, CheckpointInfo>> known_steps;
  // Whether a committed step loads whole, as this manager found it (a load
  // that met damage in it, a check before a save over it, its own commit),
  // for the manifest object it found (size and mtime): a step rewritten
  // since is judged again. The coordinator's decide whether a save replaces
  // the step (replace.h); a few of the newest are kept.
  struct StepVerdict {
    ObjectInfo manifest;
    std::string damage;  // why it does not load whole; empty: it does
  };
  std::map<int64_t, StepVerdict> verdicts;
  // For the commit record's timing: when the save in progress began on
  // this rank (steady clock, ms), and the caller's stall of the background
  // save in progress (its copy into staging memory).
  int64_t save_started_ms = 0;
  int64_t background_stall_ms = 0;
  // Emptied chunk rows for the next save to fill: those of the parent an
  // incremental save read (whose own index ManifestStore keeps until the
  // next save takes it as its parent). With 4 KiB chunks a 2 GiB state has
  // half a million rows (21 MB); fresh memory for them at every save cost
  // more than the rest of a small incremental save on a VM where every page
  // fault is a trip to the hypervisor (docs/benchmarks.md). Holds 48 bytes
  // per chunk between saves (1% of the data at 4 KiB chunks, 0.001% at
  // 4 MiB), beside the index kept.
  std::vector<std::vector<ChunkRow>> spare_rows;
  // What Compression::kAuto decides from, on this rank (save.cc,
  // ChooseCompression): the speed its data objects went to the storage at
  // (stored bytes per second of writing; the fastest of its last
  // kWritesKept, in `writes`), and the speed and ratio its chunks compress
  // at (raw bytes per second with the I/O threads; stored over raw bytes),
  // from its last compressed save or a sample. 0: not measured yet.
  struct CompressionFigures {
    static constexpr size_t kWritesKept = 3;
    double write_bps = 0;
    std::array<double, kWritesKept> writes = {};
    size_t next_write = 0;  // where in `writes` the next one goes
    double compress_bps = 0;
    double ratio = 0;
  };
  CompressionFigures compression_figures;
};

}  // namespace ckpt
