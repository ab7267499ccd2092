#include "checkpoint/catalog_record.h"

#include "format/constants.h"
#include "util/log.h"

namespace ckpt {
namespace {

// "a", "a and b", "a, b and c".
std::string JoinAnd(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += i + 1 == parts.size() ? " and " : ", ";
    out += parts[i];
  }
  return out;
}

}  // namespace

std::string ManifestChecksum(std::string_view manifest_bytes) {
  constexpr size_t kHexDigits = 32;
  const std::string_view prefix = format::kEnvelopePrefix;
  if (!manifest_bytes.starts_with(prefix) ||
      manifest_bytes.size() < prefix.size() + kHexDigits) {
    return "";
  }
  return std::string(manifest_bytes.substr(prefix.size(), kHexDigits));
}

CatalogCheckpoint CatalogRecordFor(const CheckpointInfo& info,
                                   std::string_view root,
                                   std::string manifest_checksum) {
  CatalogCheckpoint c;
  c.job_id = info.job_id;
  c.root = CatalogRootUrl(root);
  c.step = info.step;
  c.epoch = info.epoch;
  const size_t sep = c.root.find("://");
  c.scheme = sep == std::string::npos ? "file" : c.root.substr(0, sep);
  c.world_size = info.world_size;
  c.hosts = info.hosts;
  c.bytes = info.bytes;
  c.manifest_checksum = std::move(manifest_checksum);
  c.metrics = info.metrics;
  c.created_unix_ms = info.created_unix_ms;
  return c;
}

void CatalogRecorder::Committed(const CheckpointInfo& info,
                                std::string_view manifest_bytes) {
  if (!catalog_) return;
  std::string what =
      "step " + std::to_string(info.step) + " is committed in " + Root();
  if (batch_failed_) {
    missed_.push_back(std::move(what));
    return;
  }
  if (!behind_) {
    Status s = catalog_->Record(
        CatalogRecordFor(info, Root(), ManifestChecksum(manifest_bytes)));
    if (!s.ok()) Failed(s, std::move(what));
    return;
  }
  // An earlier call failed: the sync writes its rows and this one.
  Result<std::vector<CheckpointInfo>> infos = list_();
  Result<CatalogSyncReport> synced =
      infos.ok() ? SyncCatalogWith(storage_, *infos, *catalog_)
                 : Result<CatalogSyncReport>(infos.status());
  if (!synced.ok()) return Failed(synced.status(), std::move(what));
  behind_ = false;
  LogInfo("catalog " + catalog_->url() + " is up to date with " + Root() +
          " again: " + std::to_string(synced->added.size()) + " added, " +
          std::to_string(synced->updated.size()) + " updated, " +
          std::to_string(synced->marked_deleted.size()) + " marked deleted");
}

void CatalogRecorder::Deleted(int64_t step) {
  if (!catalog_) return;
  std::string what =
      "step " + std::to_string(step) + " is deleted from " + Root();
  if (batch_failed_ || behind_) {
    // The next sync marks it; waiting for the catalog again gains nothing.
    missed_.push_back(std::move(what));
    if (batch_depth_ == 0) Warn();
    return;
  }
  Result<bool> marked = catalog_->MarkDeleted(CatalogRootUrl(Root()), step);
  if (!marked.ok()) Failed(marked.status(), std::move(what));
}

void CatalogRecorder::Failed(const Status& error, std::string missed) {
  behind_ = true;
  error_ = error;
  missed_.push_back(std::move(missed));
  if (batch_depth_ > 0) {
    batch_failed_ = true;
  } else {
    Warn();
  }
}

void CatalogRecorder::Warn() {
  batch_failed_ = false;
  if (missed_.empty()) return;
  LogWarning(JoinAnd(missed_) +
             ", but the catalog was not told: " + error_.ToString() +
             " (the next save brings it up to date, or run: ckpt catalog "
             "sync " +
             Root() + ")");
  missed_.clear();
}

}  // namespace ckpt
