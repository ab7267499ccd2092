// The catalog rows of a local tier (ckpt/catalog.h, CatalogTier::kLocal).
//
// After each local-tier commit rank 0 records the step, with the tier's
// URL as its root (the same path on every node), the ranks' host names
// and the bytes of every share; the steps that pruning removes are marked
// deleted. Such a row tells people and schedulers that the job could
// resume from node memory: `ckpt catalog latest`/`best` and
// Catalog::Latest never offer one, since no other machine can open it,
// and `ckpt catalog sync` refuses a local tier (a sync from one machine
// sees one node's memory, and would record a share as a durable root).
// As for durable saves, a catalog failure is a warning, never a failed
// save; the calls join the durable manager's batch of the save
// (catalog_record.h), so a save waits for a catalog that does not answer
// once at most, and a save in the background not at all.

#include <chrono>
#include <string_view>
#include <vector>

#include "checkpoint/catalog_record.h"
#include "checkpoint/manager_access.h"
#include "ckpt/catalog_sync.h"
#include "format/layout.h"
#include "format/tier_layout.h"
#include "tiers/tiered_impl.h"

namespace ckpt {

std::string TieredManager::Impl::LocalCatalogRoot() const {
  std::string url = opt_.local_url;
  if (url.find("://") == std::string::npos && !url.empty() && url[0] == '/') {
    url = "file://" + url;
  }
  return CatalogRootUrl(url);
}

void TieredManager::Impl::RecordLocal(int64_t step,
                                      const TierSaveOptions& options,
                                      uint64_t bytes) {
  const std::shared_ptr<Catalog>& catalog = durable_.options().catalog;
  if (rank_ != 0 || !catalog) return;
  CheckpointManager& own = *roots_.at(rank_);
  CheckpointInfo info;
  info.job_id = durable_.options().job_id;
  info.step = step;
  info.epoch = options.save.epoch;
  info.world_size = world_;
  info.hosts = hosts_;
  info.bytes = bytes;
  info.metrics = options.save.metrics;
  info.created_unix_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count();
  // Rank 0's share manifest stands for the step: a row and a step saved
  // again over it tell apart by it.
  std::string checksum;
  if (Result<std::string> manifest =
          own.storage().ReadAll(format::ManifestKey(step));
      manifest.ok()) {
    checksum = ManifestChecksum(*manifest);
  }
  CatalogCheckpoint c =
      CatalogRecordFor(info, LocalCatalogRoot(), std::move(checksum));
  c.tier = CatalogTier::kLocal;
  ManagerAccess::Of(durable_).catalog.RecordOther(
      std::move(c), "local step " + std::to_string(step) + " is committed in " +
                        LocalCatalogRoot());
}

void TieredManager::Impl::ForgetLocal(const std::vector<int64_t>& steps) {
  const std::shared_ptr<Catalog>& catalog = durable_.options().catalog;
  if (rank_ != 0 || !catalog) return;
  const std::string root = LocalCatalogRoot();
  CatalogRecorder& recorder = ManagerAccess::Of(durable_).catalog;
  for (int64_t step : steps) {
    recorder.DeletedOther(
        root, step,
        "local step " + std::to_string(step) + " is deleted from " + root);
  }
}

namespace {

// Whether `storage` is a local tier's root, by its names alone
// (format/tier_layout.h): a share's root holds tier markers, a node's root
// holds share folders.
Result<bool> IsLocalTierRoot(Storage& storage) {
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> markers,
                        storage.List(format::kTierMarkerPrefix));
  for (const ObjectInfo& o : markers) {
    int64_t step = 0;
    int world = 0;
    if (format::ParseTierMarkerKey(o.key, &step, &world)) return true;
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> keys, storage.List("r"));
  for (const ObjectInfo& o : keys) {
    int rank = 0;
    std::string_view rest;
    if (format::SplitShareKey(o.key, &rank, &rest) &&
        (rest.starts_with("step-") ||
         rest.starts_with(format::kTierMarkerPrefix))) {
      return true;
    }
  }
  return false;
}

}  // namespace

Result<CatalogSyncReport> SyncCatalog(CheckpointManager& manager,
                                      Catalog& catalog) {
  // A root a person names may be a node's memory or a share in it (what
  // it holds says so), which only the tiers can tell; a manager's own
  // catch-up sync (SyncCatalogWith) never is one.
  CKPT_ASSIGN_OR_RETURN(bool is_local, IsLocalTierRoot(manager.storage()));
  if (is_local) {
    return LocalTierRefusal(catalog, CatalogRootUrl(manager.storage().url()));
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> infos, manager.List());
  return SyncCatalogWith(manager.storage(), infos, catalog);
}

}  // namespace ckpt
