// Keeping a catalog (ckpt/catalog.h) true to storage. Storage is the truth:
// a catalog row says a checkpoint was committed, and these functions check
// that it still is, or repair the catalog where it is not.
#pragma once

#include <cstdint>
#include <vector>

#include "ckpt/catalog.h"
#include "ckpt/checkpoint_manager.h"
#include "ckpt/status.h"

namespace ckpt {

struct CatalogSyncReport {
  std::string root;  // the root as the catalog names it
  // Committed on storage but missing from the catalog, or marked deleted
  // there: recorded.
  std::vector<int64_t> added;
  // In the catalog as another commit (another manifest checksum or job):
  // recorded again.
  std::vector<int64_t> updated;
  // Committed in the catalog but gone from storage (or their manifest no
  // longer validates): marked deleted.
  std::vector<int64_t> marked_deleted;
  size_t unchanged = 0;
};

// Reconciles `catalog` with the committed checkpoints under `manager`'s
// root. Nothing on storage changes. Safe to run at any time, and again.
Result<CatalogSyncReport> SyncCatalog(CheckpointManager& manager,
                                      Catalog& catalog);

// Whether the checkpoint a catalog row names is committed on storage as the
// same commit: its manifest exists, validates, and carries the row's
// checksum. NotFound when it is gone, DataLoss when its manifest is
// damaged, FailedPrecondition when it is another commit; each message says
// to run `ckpt catalog sync`.
Status CheckAgainstStorage(const CatalogCheckpoint& row);

// How a root URL is written in the catalog: a plain path or a file:// URL
// becomes file:// and the absolute, normalized path (a plain path's '%',
// '?' and '#' percent-encoded, so that the URL opens the same folder);
// other URLs are kept.
std::string CatalogRootUrl(std::string_view root);

// How a job id is written in manifests and the catalog: one given as a path
// (starting with "/", "./" or "../", or a file:// URL) becomes its
// CatalogRootUrl, so that every spelling of one root names one job; any
// other id is kept as given. A manager's default job id is its root's
// CatalogRootUrl.
std::string CatalogJobId(std::string_view job_id);

// Whether CatalogJobId takes `job_id` for a path (and so a root).
bool JobIdIsPath(std::string_view job_id);

// A job as a caller names it in a query (`ckpt catalog latest JOB`,
// Python's Catalog.latest(job), the C API's catalog queries).
struct CatalogJobRef {
  std::string job_id;
  // Where the job was named by a root given as a path: that root's URL
  // (CatalogRootUrl), and the query answers from that root alone, not from
  // another root the same job id saved under (a copy of the root, a job
  // moved with its own id). Empty for a job named by its id.
  std::string root;
};

// An id is the job as given. A path (JobIdIsPath) is the job whose
// checkpoints the catalog records under that root, whatever its id: the
// root's URL where it kept the default id, its own (Options::job_id) where
// it set one; a root the catalog has no row of names its default job. A
// root that several jobs saved into is FailedPrecondition naming their ids.
Result<CatalogJobRef> ResolveCatalogJob(Catalog& catalog, std::string_view job);

// Catalog::Ranked for `ref`: the job's committed durable rows with
// `metric`, best first; of its root alone where it was named by one.
Result<std::vector<CatalogCheckpoint>> RankedRows(Catalog& catalog,
                                                  const CatalogJobRef& ref,
                                                  std::string_view metric,
                                                  MetricGoal goal);

}  // namespace ckpt
