// CheckpointManager: the public facade over the protocols (root_context.h
// lists the file of each). It checks options, takes the manager's lock for
// every call (waiting for a save in flight), and turns any escaping
// exception into an error, so no exception crosses the library boundary.
#include <chrono>
#include <cstdio>
#include <random>

#include "checkpoint/async_save.h"
#include "checkpoint/delete.h"
#include "checkpoint/gc.h"
#include "checkpoint/inspect.h"
#include "checkpoint/load.h"
#include "checkpoint/manager_access.h"
#include "checkpoint/save.h"
#include "checkpoint/verify.h"
#include "format/constants.h"
#include "util/log.h"

namespace ckpt {

bool IsInternalEntryName(std::string_view name) {
  return name.size() > 4 && name.starts_with("__") && name.ends_with("__");
}

CheckpointInfo InfoFromManifest(const format::Manifest& m) {
  CheckpointInfo info;
  info.step = m.step;
  info.epoch = m.epoch;
  info.created_unix_ms = m.created_unix_ms;
  info.job_id = m.job_id;
  info.world_size = m.world_size;
  info.hosts = m.hosts;
  info.bytes = m.OwnObjectBytes();
  info.referenced_bytes = m.TotalObjectBytes() - info.bytes;
  info.depends_on = m.depends_on;
  info.parent = m.parent;
  info.chain = m.chain;
  info.metrics = m.metrics;
  info.metadata = m.metadata;
  for (const format::EntryRecord& e : m.entries) {
    ++(IsInternalEntryName(e.name) ? info.internal_entries : info.num_entries);
  }
  if (m.timing) {
    info.timing.recorded = true;
    info.timing.save_ms = m.timing->save_ms;
    info.timing.commit_ms = m.timing->commit_ms;
    info.timing.stall_ms = m.timing->stall_ms;
    info.timing.async = m.timing->async;
    for (const format::SaveTimingRecord::Rank& r : m.timing->ranks) {
      info.timing.ranks.push_back({r.rank, r.write_ms, r.wait_ms});
    }
  }
  return info;
}

bool IsTemporaryOf(const Storage& storage, std::string_view key,
                   std::optional<std::string_view> target) {
  std::optional<std::string> of = storage.TemporaryOf(key);
  return of && (!target || *of == *target);
}

std::string RankLocalName(std::string_view name, int rank) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "@rank%05d", rank);
  return std::string(name) + buf;
}

RootContext::RootContext(std::unique_ptr<Storage> storage_in,
                         Options options_in)
    : storage(std::move(storage_in)),
      options(std::move(options_in)),
      manifests(*storage) {
  if (options.communicator == nullptr) {
    local = NewLocalCommunicator();
    options.communicator = local.get();
  }
  // A job named by its root, or by a path, is one job however the path was
  // spelled.
  options.job_id = options.job_id.empty() ? CatalogRootUrl(storage->url())
                                          : CatalogJobId(options.job_id);
  // Only the coordinator writes what the lease guards.
  LeaseSettings settings;
  if (comm().rank() == 0) {
    settings.period_ms = static_cast<int64_t>(options.lease_seconds * 1000);
  } else {
    settings.period_ms = 0;
  }
  settings.wait_ms = static_cast<int64_t>((options.lease_wait_seconds < 0
                                               ? options.lease_seconds + 10
                                               : options.lease_wait_seconds) *
                                          1000);
  settings.break_lease = options.break_lease;
  settings.job_id = options.job_id;
  lease = std::make_unique<RootLease>(*storage, std::move(settings));
  if (!options.now_unix_ms) {
    options.now_unix_ms = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  }
}

namespace {

// A root that no save has created yet has nothing to read: a mistyped path
// is an error, not a job with no checkpoints. Checked before anything else,
// so that a Delete or GarbageCollect takes no lease (whose write would
// create the root).
Status RootToRead(Storage& storage, std::string_view op) {
  Status s = storage.CheckRoot();
  if (s.code() != ErrorCode::kNotFound) return s;
  return NotFoundError(std::string(op) + ": " + s.message() +
                       ": nothing was saved there (check the path; a save "
                       "creates it, or open with create_root to start "
                       "a new job)");
}

// Whether `url` names no root yet: what opening it without creating it
// finds (an unreadable one is not missing: its error comes from the open).
bool RootIsMissing(std::string_view url) {
  StorageOptions probe;
  probe.create = false;
  Result<std::unique_ptr<Storage>> existing = OpenStorage(url, probe);
  if (!existing.ok()) return existing.status().code() == ErrorCode::kNotFound;
  return (*existing)->CheckRoot().code() == ErrorCode::kNotFound;
}

// The options checked before anything is opened or created: a root
// opened with create_root and a bad option is not left behind, made.
Status CheckOptions(const Options& options, const std::string& url) {
  if (options.chunk_size < format::kMinChunkSize) {
    return InvalidArgumentError(
        "open " + url + ": chunk_size " + std::to_string(options.chunk_size) +
        " is below the minimum of " + std::to_string(format::kMinChunkSize));
  }
  CKPT_RETURN_IF_ERROR(CheckCompression(options.compression, "open " + url));
  if (options.io_threads < 1) {
    return InvalidArgumentError("open " + url +
                                ": io_threads must be at least 1");
  }
  // A week bounds both: past it a lease is no lease, and the milliseconds
  // must fit an int64_t.
  constexpr double kWeek = 7 * 86400;
  if (!(options.lease_seconds == 0 ||
        (options.lease_seconds >= 1 && options.lease_seconds <= kWeek)) ||
      !(options.lease_wait_seconds == -1 ||
        (options.lease_wait_seconds >= 0 &&
         options.lease_wait_seconds <= kWeek))) {
    return InvalidArgumentError(
        "open " + url +
        ": lease_seconds must be 0 (no lease) or from 1 to 604800, and "
        "lease_wait_seconds from 0 to 604800 (or -1 for the default)");
  }
  if (options.min_seconds_between_saves < 0 || options.gc_grace_seconds < 0 ||
      options.retention.keep_last < 0 || options.retention.keep_best < 0 ||
      options.retention.keep_every_n_steps < 0 ||
      options.retention.keep_every_seconds < 0) {
    return InvalidArgumentError(
        "open " + url + ": retention and timing options must not be negative");
  }
  if (options.incremental.full_every < 0 || options.incremental.max_chain < 0 ||
      !(options.incremental.min_referenced_fraction >= 0 &&
        options.incremental.min_referenced_fraction <= 1)) {
    return InvalidArgumentError(
        "open " + url +
        ": incremental full_every and max_chain must not be negative, "
        "min_referenced_fraction must lie in [0, 1]");
  }
  if (options.retention.keep_best > 0 &&
      options.retention.best_metric.empty()) {
    return InvalidArgumentError("open " + url +
                                ": keep_best needs best_metric");
  }
  return Status();
}

}  // namespace

CheckpointManager::CheckpointManager(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
CheckpointManager::~CheckpointManager() = default;

Result<std::unique_ptr<CheckpointManager>> CheckpointManager::Open(
    std::string_view url, Options options) {
  return Guard("open " + std::string(url),
               [&]() -> Result<std::unique_ptr<CheckpointManager>> {
                 if (options.create_root && !options.create) {
                   return InvalidArgumentError(
                       "open " + std::string(url) +
                       ": create_root needs create (a root that must exist "
                       "is not created)");
                 }
                 CKPT_RETURN_IF_ERROR(CheckOptions(options, std::string(url)));
                 // create_root makes a mistyped path a fresh start: say
                 // so, naming the root, whenever it starts a new one.
                 const bool starts_root =
                     options.create_root && RootIsMissing(url);
                 StorageOptions so;
                 so.create = options.create;
                 so.create_on_first_write = !options.create_root;
                 CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Storage> storage,
                                       OpenStorage(url, so));
                 if (starts_root) {
                   // A shell expands a leading ~, ckpt does not: the
                   // root is a folder named ~ under the current one.
                   const bool tilde = url.starts_with("~");
                   LogWarning("created a new, empty root " + storage->url() +
                              ": it did not exist (create_root; Python "
                              "create=True). A job meant to resume: check "
                              "the path" +
                              (tilde ? " (a leading ~ is a folder named ~ "
                                       "here, not the home folder: ckpt "
                                       "does not expand it)"
                                     : ""));
                 }
                 return Open(std::move(storage), std::move(options));
               });
}

Result<std::unique_ptr<CheckpointManager>> CheckpointManager::Open(
    std::unique_ptr<Storage> storage, Options options) {
  if (storage == nullptr) return InvalidArgumentError("open: no storage given");
  CKPT_RETURN_IF_ERROR(CheckOptions(options, storage->url()));
  const uint64_t prepare = options.async_staging_prepare_bytes;
  auto impl = std::make_unique<Impl>(std::move(storage), std::move(options));
  // Off the caller's path from now on; the first SaveAsync takes it.
  impl->root.staging.PrepareInBackground(prepare);
  return std::unique_ptr<CheckpointManager>(
      new CheckpointManager(std::move(impl)));
}

Result<SaveResult> CheckpointManager::Save(int64_t step, const State& state,
                                           const SaveOptions& options) {
  RootContext& root = impl_->root;
  MutexLock lock(&root.mu);
  root.WaitIdle();
  if (Status s = TakeAsyncError(root, step); !s.ok()) {
    // With many ranks the others may have collected it and be saving: this
    // rank fails the same save with it rather than leave them waiting.
    if (root.comm().size() == 1) return s;
    return Guard("save",
                 [&] { return Saver(root).Save(step, state, options, s); });
  }
  return Guard("save", [&] { return Saver(root).Save(step, state, options); });
}

SaveHandle CheckpointManager::SaveAsync(int64_t step, const State& state,
                                        const SaveOptions& options) {
  auto handle = std::make_shared<internal::SaveHandleState>(step);
  RootContext& root = impl_->root;
  MutexLock lock(&root.mu);
  StartAsync(root, step, state, options, handle);
  return SaveHandle(std::move(handle));
}

Result<CheckpointInfo> CheckpointManager::Load(std::optional<int64_t> step,
                                               State& state,
                                               const LoadOptions& options) {
  RootContext& root = impl_->root;
  MutexLock lock(&root.mu);
  root.WaitIdle();
  return Guard("load", [&]() -> Result<CheckpointInfo> {
    CKPT_RETURN_IF_ERROR(RootToRead(*root.storage, "load"));
    return Loader(root).Load(step, state, options);
  });
}

Result<LoadedCheckpoint> CheckpointManager::LoadRankLocal(
    std::optional<int64_t> step, std::string_view name) {
  RootContext& root = impl_->root;
  MutexLock lock(&root.mu);
  root.WaitIdle();
  return Guard("load", [&]() -> Result<LoadedCheckpoint> {
    CKPT_RETURN_IF_ERROR(RootToRead(*root.storage, "load"));
    return Loader(root).LoadRankLocal(step, name);
  });
}

Result<LoadedCheckpoint> CheckpointManager::LoadAll(
    std::optional<int64_t> step, const std::vector<std::string>& names) {
  RootContext& root = impl_->root;
  MutexLock lock(&root.mu);
  root.WaitIdle();
  return Guard("load", [&]() -> Result<LoadedCheckpoint> {
    CKPT_RETURN_IF_ERROR(RootToRead(*root.storage, "load"));
    return Loader(root).LoadAll(step, names);
  });
}

Result<std::optional<int64_t>> CheckpointManager::Latest() {
  RootContext& root = impl_->root;
  MutexLock lock(&root.mu);
  root.WaitIdle();
  return Guard("latest", [&]() -> Result<std::optional<int64_t>> {
    CKPT_RETURN_IF_ERROR(RootToRead(*root.storage, "latest"));
    return Inspector(root).Latest();
  });
}

Result<std::vector<CheckpointInfo>> CheckpointManager::List() {
  RootContext& root = impl_->root;
  MutexLock lock(&root.mu);
  root.WaitIdle();
  return Guard("list", [&]() -> Result<std::vector<CheckpointInfo>> {
    CKPT_RETURN_IF_ERROR(RootToRead(*root.storage, "list"));
    return Inspector(root).List();
  });
}

Result<CheckpointDescription> CheckpointManager::Describe(
    std::optional<int64_t> step) {
  RootContext& root = impl_->root;
  MutexLock lock(&root.mu);
  root.WaitIdle();
  return Guard("describe", [&]() -> Result<CheckpointDescription> {
    CKPT_RETURN_IF_ERROR(RootToRead(*root.storage, "describe"));
    return Inspector(root).Describe(step);
  });
}

Result<VerifyReport> CheckpointManager::Verify(int64_t step,
                                               const ProgressFn& progress) {
  RootContext& root = impl_->root;
  MutexLock lock(&root.mu);
  root.WaitIdle();
  return Guard("verify", [&]() -> Result<VerifyReport> {
    CKPT_RETURN_IF_ERROR(RootToRead(*root.storage, "verify"));
    return Verifier(root).Verify(step, progress);
  });
}

Result<DeleteReport> CheckpointManager::Delete(int64_t step) {
  return Delete(step, DeleteOptions{});
}

Result<DeleteReport> CheckpointManager::Delete(int64_t step,
                                               const DeleteOptions& options) {
  // Like every call, after the save in flight: a delete beside a background
  // save could remove the parent it references.
  RootContext& root = impl_->root;
  MutexLock lock(&root.mu);
  root.WaitIdle();
  return Guard("delete", [&]() -> Result<DeleteReport> {
    CKPT_RETURN_IF_ERROR(RootToRead(*root.storage, "delete"));
    // The next save looks at the root again (root_context.h).
    root.known_steps.reset();
    DeleteReport report;
    auto run = [&] {
      return Deleter(root).Delete(step, nullptr, &report, options.dry_run,
                                  options.rewrite_dependants);
    };
    // A dry run writes nothing, so it needs no lease (as a collection's).
    CKPT_RETURN_IF_ERROR(options.dry_run ? run() : root.Owning("delete", run));
    return report;
  });
}

Result<GcReport> CheckpointManager::GarbageCollect(const GcOptions& options) {
  RootContext& root = impl_->root;
  MutexLock lock(&root.mu);
  root.WaitIdle();
  return Guard("gc", [&]() -> Result<GcReport> {
    CKPT_RETURN_IF_ERROR(RootToRead(*root.storage, "gc"));
    // A dry run writes nothing, so it needs no lease: it reports what a
    // collection holding the lease would remove.
    if (options.dry_run) return Collector(root).GarbageCollect(options);
    return root.Owning("gc",
                       [&] { return Collector(root).GarbageCollect(options); });
  });
}

Storage& CheckpointManager::storage() { return *impl_->root.storage; }
const Options& CheckpointManager::options() const {
  return impl_->root.options;
}

}  // namespace ckpt
