// The reconciliation of a catalog with storage (the rows the coordinator
// records are catalog_record.cc's).
//
// Sync, for one root (never a tiered manager's local tier: its rows are the
// manager's, tier_catalog.cc):
//   1. List the committed checkpoints on storage (manifests that validate)
//      and read each manifest's envelope checksum.
//   2. List the catalog's rows of the root, in every state.
//   3. A checkpoint without a row, with a deleted row, or with a row of
//      another commit (checksum or job differ) is recorded.
//   4. A committed row whose checkpoint is not on storage is marked deleted.
// Storage is only read, so a sync can run at any time, while the job saves.

#include "ckpt/catalog_sync.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <string_view>
#include <vector>

#include "checkpoint/catalog_record.h"
#include "checkpoint/manifests.h"
#include "ckpt/storage.h"
#include "format/constants.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "util/names.h"

namespace ckpt {

std::string CatalogRootUrl(std::string_view root) {
  Result<ParsedUrl> parsed = ParseUrl(root);
  if (!parsed.ok() || parsed->scheme != "file" || !parsed->host.empty()) {
    return std::string(root);
  }
  std::string path = parsed->path;
  if (path.empty() || path[0] != '/') return std::string(root);
  path = std::filesystem::path(path).lexically_normal().string();
  if (path.size() > 1 && path.back() == '/') path.pop_back();
  if (root.find("://") == std::string_view::npos) {
    // A plain path is taken as it is; in a file URL '%' starts an escape
    // and '?' and '#' end the path, so those three are escaped: the row's
    // URL must open the same folder (a root "run%41b" is not "runAb").
    std::string escaped;
    for (char c : path) {
      if (c == '%') {
        escaped += "%25";
      } else if (c == '?') {
        escaped += "%3F";
      } else if (c == '#') {
        escaped += "%23";
      } else {
        escaped += c;
      }
    }
    path = std::move(escaped);
  }
  return "file://" + path;
}

bool JobIdIsPath(std::string_view job_id) {
  return job_id.starts_with("/") || job_id.starts_with("./") ||
         job_id.starts_with("../") || job_id == "." || job_id == ".." ||
         job_id.starts_with("file://");
}

std::string CatalogJobId(std::string_view job_id) {
  return JobIdIsPath(job_id) ? CatalogRootUrl(job_id) : std::string(job_id);
}

Result<CatalogJobRef> ResolveCatalogJob(Catalog& catalog,
                                        std::string_view job) {
  const std::string id = CatalogJobId(job);
  if (!JobIdIsPath(job)) return CatalogJobRef{.job_id = id};
  CKPT_ASSIGN_OR_RETURN(std::vector<CatalogCheckpoint> rows,
                        catalog.List({.root = id, .state = std::nullopt}));
  std::vector<std::string> jobs;
  for (const CatalogCheckpoint& c : rows) {
    if (std::find(jobs.begin(), jobs.end(), c.job_id) == jobs.end()) {
      jobs.push_back(c.job_id);
    }
  }
  if (jobs.size() > 1) {
    std::string quoted;
    for (const std::string& j : jobs) {
      quoted += (quoted.empty() ? "" : ", ") + Quote(j);
    }
    return FailedPreconditionError("root " + id + " holds checkpoints of " +
                                   std::to_string(jobs.size()) +
                                   " jobs in catalog " + catalog.url() + " (" +
                                   quoted + "): name the job by its id");
  }
  return CatalogJobRef{.job_id = jobs.empty() ? id : jobs[0], .root = id};
}

Result<std::vector<CatalogCheckpoint>> RankedRows(Catalog& catalog,
                                                  const CatalogJobRef& ref,
                                                  std::string_view metric,
                                                  MetricGoal goal) {
  Result<std::vector<CatalogCheckpoint>> rows =
      catalog.Ranked(ref.job_id, metric, goal);
  if (!rows.ok() || ref.root.empty()) return rows;
  std::erase_if(*rows,
                [&](const CatalogCheckpoint& c) { return c.root != ref.root; });
  return rows;
}

namespace {

std::string SyncOp(const Catalog& catalog, std::string_view root) {
  return "sync catalog " + catalog.url() + " with " + std::string(root);
}

}  // namespace

Status LocalTierRefusal(const Catalog& catalog, std::string_view root) {
  return FailedPreconditionError(
      SyncOp(catalog, root) + ": " + std::string(root) +
      " is a local tier (node memory, or a share in it): its steps are "
      "recorded by the job's tiered manager, and no other machine can open "
      "them; sync the job's durable root instead");
}

Result<CatalogSyncReport> SyncCatalogWith(
    Storage& storage, const std::vector<CheckpointInfo>& infos,
    Catalog& catalog) {
  CatalogSyncReport report;
  report.root = CatalogRootUrl(storage.url());
  const std::string op = SyncOp(catalog, report.root);
  // 1. What storage holds.
  std::map<int64_t, CatalogCheckpoint> on_storage;
  for (const CheckpointInfo& info : infos) {
    Result<std::string> bytes = storage.ReadAll(format::ManifestKey(info.step));
    if (!bytes.ok()) {
      // Deleted since the listing: gone, like any other missing step.
      if (bytes.status().code() == ErrorCode::kNotFound) continue;
      return bytes.status().WithContext(op);
    }
    on_storage.emplace(info.step, CatalogRecordFor(info, storage.url(),
                                                   ManifestChecksum(*bytes)));
  }
  // 2. What the catalog says.
  CKPT_ASSIGN_OR_RETURN(
      std::vector<CatalogCheckpoint> rows,
      catalog.List({.root = report.root, .state = std::nullopt}));
  std::map<int64_t, const CatalogCheckpoint*> in_catalog;
  for (const CatalogCheckpoint& row : rows) {
    // A local tier's root, seen from a machine where it is empty.
    if (row.tier == CatalogTier::kLocal) {
      return LocalTierRefusal(catalog, report.root);
    }
    in_catalog[row.step] = &row;
  }
  // 3. Record what the catalog lacks or holds differently.
  for (const auto& [step, want] : on_storage) {
    auto it = in_catalog.find(step);
    std::vector<int64_t>* list = nullptr;
    if (it == in_catalog.end() ||
        it->second->state != CheckpointState::kCommitted) {
      list = &report.added;
    } else if (it->second->manifest_checksum != want.manifest_checksum ||
               it->second->job_id != want.job_id) {
      list = &report.updated;
    } else {
      ++report.unchanged;
      continue;
    }
    CKPT_RETURN_IF_ERROR_CTX(catalog.Record(want), op);
    list->push_back(step);
  }
  // 4. Mark what storage no longer holds.
  for (const CatalogCheckpoint& row : rows) {
    if (row.state != CheckpointState::kCommitted ||
        on_storage.count(row.step)) {
      continue;
    }
    CKPT_ASSIGN_OR_RETURN(bool marked,
                          catalog.MarkDeleted(report.root, row.step));
    if (marked) report.marked_deleted.push_back(row.step);
  }
  return report;
}

Status CheckAgainstStorage(const CatalogCheckpoint& row) {
  const std::string what = "step " + std::to_string(row.step) + " of job " +
                           row.job_id + " in " + row.root;
  const std::string hint =
      " (the catalog is stale: run ckpt catalog sync " + row.root + ")";
  StorageOptions options;
  options.create = false;
  Result<std::unique_ptr<Storage>> storage = OpenStorage(row.root, options);
  if (!storage.ok()) return storage.status().WithContext("check " + what);
  const std::string key = format::ManifestKey(row.step);
  Result<std::string> bytes = (*storage)->ReadAll(key);
  if (!bytes.ok()) {
    if (bytes.status().code() == ErrorCode::kNotFound) {
      return NotFoundError(what + " is not committed on storage: " + key +
                           " is missing" + hint);
    }
    return bytes.status().WithContext("check " + what);
  }
  Result<format::Manifest> manifest =
      format::DecodeManifest(*bytes, key + " in " + row.root);
  if (!manifest.ok()) {
    return Status(manifest.status().code(), manifest.status().message() + hint);
  }
  if (ManifestChecksum(*bytes) != row.manifest_checksum) {
    return FailedPreconditionError(
        what +
        " on storage is another commit than the catalog's (manifest "
        "checksum " +
        ManifestChecksum(*bytes) + ", catalog " + row.manifest_checksum + ")" +
        hint);
  }
  // The check a resume makes before it picks a step (ManifestStore::
  // NewestComplete), from one listing of the step's folder: every object
  // there at its recorded size. A step that fails it is one a resume skips,
  // and a scheduler told to resume from it would fail.
  ManifestStore store(**storage);
  Result<std::shared_ptr<const format::Manifest>> summary =
      store.Summary(row.step);
  if (!summary.ok()) {
    return Status(summary.status().code(), summary.status().message() + hint);
  }
  Result<std::vector<ObjectInfo>> listed =
      (*storage)->List(format::StepDirName(row.step) + "/");
  if (!listed.ok()) return listed.status().WithContext("check " + what);
  std::map<std::string, uint64_t> sizes;
  for (ObjectInfo& o : *listed) sizes.emplace(std::move(o.key), o.size);
  if (std::string missing =
          ManifestStore::MissingObject(**summary, sizes, storage->get());
      !missing.empty()) {
    return DataLossError(what + " is incomplete on storage: " + missing +
                         " (a resume skips it)");
  }
  return Status();
}

}  // namespace ckpt
