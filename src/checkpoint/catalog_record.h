// What the coordinator tells the catalog (docs/design.md, save step 7): a
// committed checkpoint after its commit, a deleted one after its manifest is
// gone. A catalog failure never undoes either, and never holds a save up for
// more than one catalog timeout (an asynchronous one not at all): it is
// logged as a warning, once per save, and the next commit (or `ckpt catalog
// sync`) writes what was missed.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ckpt/catalog.h"
#include "ckpt/catalog_sync.h"
#include "ckpt/checkpoint_manager.h"
#include "ckpt/storage.h"

namespace ckpt {

// The xxh3-128 hex digits an encoded manifest's envelope carries (the
// checksum of its body); empty if `manifest_bytes` is not an envelope.
std::string ManifestChecksum(std::string_view manifest_bytes);

// The catalog row of the committed checkpoint `info` under `root`.
CatalogCheckpoint CatalogRecordFor(const CheckpointInfo& info,
                                   std::string_view root,
                                   std::string manifest_checksum);

// SyncCatalog for the committed checkpoints `infos` of `storage`'s root.
// It knows nothing of the tiers' layout: SyncCatalog (src/tiers) refuses a
// local tier's root before calling it, and it refuses a root whose rows
// the catalog holds as a local tier's.
Result<CatalogSyncReport> SyncCatalogWith(
    Storage& storage, const std::vector<CheckpointInfo>& infos,
    Catalog& catalog);

// The refusal to sync `root`, a local tier (node memory, or a share in it).
Status LocalTierRefusal(const Catalog& catalog, std::string_view root);

// One manager's writes to its catalog (none when the catalog is null).
//
// Calls are grouped in batches (a save's commit and its retention, a tiered
// save's local and durable rows, a delete). A batch's calls are made in
// order on the recorder's own thread, batch after batch: after the first
// failure in a batch the rest are not tried, and a batch that was waiting
// behind a failed one is not tried at all, so no batch, and no caller,
// waits for the catalog more than once (CatalogOptions::timeout_ms); one
// warning at the batch's end names everything the catalog missed. The
// caller of a batch waits for it to be made (a synchronous save: its rows
// are there when it returns), or not at all (an asynchronous save: the next
// call never waits for the catalog).
//
// When a call fails (the database is down, or another process holds it past
// the timeout) the recorder remembers that the catalog is behind the root;
// its first commit also compares the catalog's steps of the root with
// storage's (a process killed between a commit and its row leaves the
// catalog behind with no failure to remember).
// The next commit then syncs the root (SyncCatalogWith) instead of
// recording one row, which writes every row that was missed; until then a
// delete does not wait for the catalog again, since the sync marks it too.
class CatalogRecorder {
 public:
  // Lists the committed checkpoints of the root; called on the recorder's
  // thread, so it must not touch the manager's state.
  using ListFn = std::function<Result<std::vector<CheckpointInfo>>()>;

  // `list` lists the committed checkpoints of `storage`'s root.
  CatalogRecorder(std::shared_ptr<Catalog> catalog, Storage& storage,
                  ListFn list)
      : catalog_(std::move(catalog)),
        storage_(storage),
        list_(std::move(list)) {}
  // Makes what is queued (waiting for the catalog once at most), then stops.
  ~CatalogRecorder();
  CatalogRecorder(const CatalogRecorder&) = delete;
  CatalogRecorder& operator=(const CatalogRecorder&) = delete;

  // Groups the calls made while it lives; batches nest (the outermost one
  // hands them over). `wait`, of the outermost: whether its end waits until
  // they are made.
  class [[nodiscard]] Batch {
   public:
    explicit Batch(CatalogRecorder& recorder, bool wait = true)
        : recorder_(recorder) {
      recorder_.Open(wait);
    }
    ~Batch() { recorder_.Close(); }
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;

   private:
    CatalogRecorder& recorder_;
  };

  // After the checkpoint `info`, whose manifest is `manifest_bytes`, was
  // committed (or its manifest rewritten): records its row.
  void Committed(const CheckpointInfo& info, std::string_view manifest_bytes);
  // After the checkpoint at `step` was deleted: marks its row.
  void Deleted(int64_t step);
  // A row of another root (a tiered job's local tier), recorded or marked
  // deleted in turn with this root's; `what` names it in a warning. No sync
  // can read another root's steps (node memory), so a call that the catalog
  // missed is kept, the last one for each root and step, and made again
  // before the next batch's calls (at most kMaxPendingOther of them, the
  // newest steps).
  void RecordOther(CatalogCheckpoint row, std::string what);
  void DeletedOther(std::string root, int64_t step, std::string what);
  static constexpr size_t kMaxPendingOther = 4096;

 private:
  struct Op {
    enum Kind { kCommitted, kDeleted, kRecordOther, kDeletedOther } kind;
    CatalogCheckpoint row;  // kCommitted, kRecordOther
    std::string root;       // kDeletedOther
    int64_t step = 0;       // kDeleted, kDeletedOther
    std::string what;       // what the catalog misses if this fails
  };
  struct Job {
    std::vector<Op> ops;
    uint64_t after = 0;  // batches completed when it was handed over
    bool done = false;
  };
  std::string Root() const { return storage_.url(); }
  void Open(bool wait);
  void Close();
  void Add(Op op);
  // Hands `ops` to the thread; with `wait`, returns once they are made.
  void Submit(std::vector<Op> ops, bool wait);
  void Run();
  // On the thread: makes one batch's calls, or skips them.
  void Execute(const Job& job, uint64_t index);
  // A call; Ok with *skipped set when it was not tried (the catalog is
  // behind: the next sync makes it).
  Status Make(const Op& op, bool* skipped);
  // Logs what the catalog missed, once.
  void Warn();
  // On the thread: whether the catalog's committed durable rows of this
  // root are another set of steps than storage's committed ones (leaving
  // out `committing`, being recorded now).
  Result<bool> CatalogBehind(int64_t committing);
  // On the thread: keeps a missed call of another root's row for later.
  void KeepOther(const Op& op);
  // On the thread: makes the kept calls again; stops at the first failure.
  Status RetryOthers();

  const std::shared_ptr<Catalog> catalog_;
  Storage& storage_;
  const ListFn list_;

  std::mutex mu_;
  std::condition_variable wake_;  // the thread: work or stop
  std::condition_variable done_;  // callers: a batch is done
  std::deque<std::shared_ptr<Job>> queue_;
  std::thread thread_;
  bool stop_ = false;
  uint64_t completed_ = 0;
  // The batch being built.
  int depth_ = 0;
  bool wait_ = true;
  std::vector<Op> building_;

  // The thread's alone.
  bool behind_ = false;     // a call failed and no sync has succeeded since
  bool checked_ = false;    // CatalogBehind asked, at this manager's first
  uint64_t failed_at_ = 0;  // the index (1-based) of the last failed batch
  Status error_;            // the last failure
  std::vector<std::string> missed_;  // not yet warned about
  // Missed calls for other roots' rows, by root and step.
  std::map<std::pair<std::string, int64_t>, Op> pending_other_;
};

// The committed checkpoints of `storage`'s root, oldest first, read apart
// from any manager (a recorder's ListFn).
Result<std::vector<CheckpointInfo>> ListCommittedApart(Storage& storage);

}  // namespace ckpt
