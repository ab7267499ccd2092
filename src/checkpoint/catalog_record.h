// What the coordinator tells the catalog (docs/design.md, save step 7): a
// committed checkpoint after its commit, a deleted one after its manifest is
// gone. A catalog failure never undoes either, and never holds a save up for
// more than one catalog timeout: it is logged as a warning, once per save,
// and the next commit (or `ckpt catalog sync`) writes what was missed.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
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
Result<CatalogSyncReport> SyncCatalogWith(
    Storage& storage, const std::vector<CheckpointInfo>& infos,
    Catalog& catalog);

// One manager's writes to its catalog (none when the catalog is null).
//
// When a call fails (the database is down, or another process holds it past
// CatalogOptions::timeout_ms) the recorder remembers that the catalog is
// behind the root. The next commit then syncs the root (SyncCatalogWith)
// instead of recording one row, which writes every row that was missed;
// until then a delete does not wait for the catalog again, since the sync
// marks it too.
//
// Calls are grouped in batches (a save's commit and its retention, a
// delete): after the first failure in a batch the rest are not tried, so
// the batch waits for the catalog at most once, and one warning at its end
// names everything the catalog missed.
class CatalogRecorder {
 public:
  using ListFn = std::function<Result<std::vector<CheckpointInfo>>()>;

  // `list` lists the committed checkpoints of `storage`'s root.
  CatalogRecorder(std::shared_ptr<Catalog> catalog, Storage& storage,
                  ListFn list)
      : catalog_(std::move(catalog)),
        storage_(storage),
        list_(std::move(list)) {}
  CatalogRecorder(const CatalogRecorder&) = delete;
  CatalogRecorder& operator=(const CatalogRecorder&) = delete;

  // Groups the calls made while it lives; batches nest (the outermost one
  // warns).
  class [[nodiscard]] Batch {
   public:
    explicit Batch(CatalogRecorder& recorder) : recorder_(recorder) {
      ++recorder_.batch_depth_;
    }
    ~Batch() {
      if (--recorder_.batch_depth_ == 0) recorder_.Warn();
    }
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

 private:
  std::string Root() const { return storage_.url(); }
  // Remembers a failed call: `missed` is what the catalog does not know.
  void Failed(const Status& error, std::string missed);
  // Logs what the catalog missed, once; outside a batch, at once.
  void Warn();

  const std::shared_ptr<Catalog> catalog_;
  Storage& storage_;
  const ListFn list_;
  bool behind_ = false;        // a call failed and no sync has succeeded since
  bool batch_failed_ = false;  // a call of the current batch failed
  int batch_depth_ = 0;
  Status error_;                     // the last failure
  std::vector<std::string> missed_;  // not yet warned about
};

}  // namespace ckpt
