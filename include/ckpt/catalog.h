// Catalog: a database of committed checkpoints across jobs, so that a
// scheduler can ask "what is this job's newest complete checkpoint?" without
// listing buckets.
//
//   auto catalog = ckpt::OpenCatalog(ckpt::DefaultCatalogUrl()).value();
//   auto last = catalog->Latest("run42");  // root and step to resume from
//
// Two databases: SQLite (a file; the default) and PostgreSQL (a
// `postgresql://` URL, when several machines share one catalog). Both hold
// the same schema, versioned and migrated on open; docs/catalog.md describes
// it. A checkpoint's row is keyed by its root and step.
//
// Storage stays the truth. A row says that a checkpoint was committed, not
// that it still is: a load always reads and checks the manifest, and
// SyncCatalog (ckpt/catalog_sync.h) reconciles a catalog with a root.
//
// Promises. Every value reaches the database as a bound parameter, never as
// SQL text. Many processes may write one catalog at once without losing a
// row (SQLite: WAL and a busy timeout; PostgreSQL: transactions). No call
// waits for the database longer than CatalogOptions::timeout_ms (5 s by
// default). A catalog written by a newer ckpt (a newer schema) is refused at
// open.
//
// Threads. A Catalog may be called from many threads; it serializes its
// calls on one connection. It must not be used in a child after fork():
// open another there.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/status.h"

namespace ckpt {

enum class CheckpointState {
  kCommitted,  // committed, and not known to be gone
  kDeleted,    // deleted by retention or Delete, or found gone by a sync
};

// "committed" / "deleted", as stored in the database.
std::string_view CheckpointStateName(CheckpointState state);

// Which tier of a TieredManager (ckpt/tiered.h) holds a checkpoint.
enum class CatalogTier {
  kDurable,  // a root any machine can open: every save of a plain manager
  // A step of a local tier: its shares are in node memory (the root is the
  // tier's local_url, the same path on every node; hosts names the nodes),
  // so only the job's own TieredManager::Restore can resume from it.
  // Latest, Best and CatalogJob's counts never offer one.
  kLocal,
};

// "durable" / "local", as stored in the database.
std::string_view CatalogTierName(CatalogTier tier);
// The tier named `name` ("durable" or "local"); InvalidArgument otherwise.
Result<CatalogTier> ParseCatalogTier(std::string_view name);

// One checkpoint's row.
struct CatalogCheckpoint {
  std::string job_id;
  std::string root;  // the root's URL (file:///data/run42)
  int64_t step = 0;
  int64_t epoch = -1;  // -1: not given
  std::string scheme;  // the root's storage scheme: "file", "mem", "s3"
  int world_size = 1;  // ranks that saved it
  std::vector<std::string> hosts;  // one host name per rank
  uint64_t bytes = 0;              // data objects the checkpoint wrote
  // The xxh3-128 hex digits of the manifest's envelope: a row and a manifest
  // with equal checksums describe the same commit.
  std::string manifest_checksum;
  std::map<std::string, double> metrics;  // the user's (SaveOptions::metrics)
  int64_t created_unix_ms = 0;            // when the checkpoint was committed
  CheckpointState state = CheckpointState::kCommitted;
  CatalogTier tier = CatalogTier::kDurable;
  // Set by the catalog: when the row was last recorded or marked.
  int64_t updated_unix_ms = 0;
};

// One job's row. A job is seen through its checkpoints: first and last seen
// are the creation times of its oldest and newest recorded checkpoints.
struct CatalogJob {
  std::string job_id;
  // The root of its most recently seen durable checkpoint (a local tier's
  // until the job has a durable one).
  std::string root;
  int64_t first_seen_unix_ms = 0;
  int64_t last_seen_unix_ms = 0;
  int64_t committed = 0;               // committed durable checkpoints
  std::optional<int64_t> latest_step;  // the newest of them, if any
};

// Which rows List returns. Every field narrows; the defaults return every
// committed checkpoint of every job.
struct CatalogFilter {
  std::string job_id = {};  // empty: every job
  std::string root = {};    // empty: every root
  // nullopt: every state.
  std::optional<CheckpointState> state = CheckpointState::kCommitted;
  std::optional<CatalogTier> tier = {};  // nullopt: both tiers
  std::optional<int64_t> min_step = {};
  std::optional<int64_t> max_step = {};
  // At most this many rows, the newest steps (0: no limit).
  int64_t limit = 0;
};

enum class MetricGoal {
  kMin,  // lower is better (a loss)
  kMax,  // higher is better (an accuracy)
};

struct CatalogOptions {
  // The longest one catalog call (opening, Record, a query) waits for the
  // database, retries included, before it fails with Unavailable: a catalog
  // that another process holds locked must not stall a save. SQLite: the
  // busy timeout, for another connection's lock. PostgreSQL: each
  // statement's statement_timeout (a URL's own `options` win).
  int timeout_ms = 5'000;
  // PostgreSQL: how long to wait for a connection (a URL's own
  // connect_timeout wins).
  int connect_timeout_seconds = 5;
  // SQLite: a file that is not there is NotFound, naming it, rather than
  // created with its folders: what a query asks (`ckpt catalog jobs`,
  // `list`, `latest`, `best`, `ckpt report`), so that a mistyped path says
  // so instead of answering from a new, empty catalog.
  bool must_exist = false;
};

class Catalog {
 public:
  virtual ~Catalog() = default;
  Catalog(const Catalog&) = delete;
  Catalog& operator=(const Catalog&) = delete;

  // The catalog's URL, with any password replaced by "***"; it names the
  // database in every error message.
  virtual const std::string& url() const = 0;

  // Records a committed checkpoint: inserts its row, or replaces the row of
  // the same root and step (state committed again), and updates its job.
  virtual Status Record(const CatalogCheckpoint& checkpoint) = 0;
  // Marks the checkpoint at `root` and `step` deleted. False when there was
  // no committed row to mark.
  virtual Result<bool> MarkDeleted(std::string_view root, int64_t step) = 0;

  // The job's newest committed durable checkpoint (highest step); nullopt
  // if none.
  virtual Result<std::optional<CatalogCheckpoint>> Latest(
      std::string_view job_id) = 0;
  // Rows matching `filter`, oldest step first.
  virtual Result<std::vector<CatalogCheckpoint>> List(
      const CatalogFilter& filter) = 0;
  // The job's committed durable checkpoint with the lowest (kMin) or highest
  // (kMax) value of `metric`; ties go to the newest step. nullopt if no
  // committed checkpoint of the job has the metric.
  virtual Result<std::optional<CatalogCheckpoint>> Best(std::string_view job_id,
                                                        std::string_view metric,
                                                        MetricGoal goal) = 0;
  // Every committed durable checkpoint of the job that has `metric`, best
  // first by Best's order (the first is Best's answer): where the best
  // does not check out against storage, `ckpt catalog best` and Python's
  // Catalog.best take the next from this one ranking.
  virtual Result<std::vector<CatalogCheckpoint>> Ranked(std::string_view job_id,
                                                        std::string_view metric,
                                                        MetricGoal goal) = 0;
  // Every job, by id.
  virtual Result<std::vector<CatalogJob>> Jobs() = 0;

 protected:
  Catalog() = default;
};

// The catalog the `ckpt` tool uses when no --catalog is given (`ckpt
// catalog` reads it; `ckpt import`, `gc` and `delete` record in it):
// $CKPT_CATALOG if set and not empty, else
// ${XDG_STATE_HOME:-~/.local/state}/ckpt/catalog.sqlite. The library never
// opens it by itself: a manager records in its Options::catalog, and the job
// runner uses the manager's.
std::string DefaultCatalogUrl();

// `url` with any password in it (user:PASSWORD@, ?password=) replaced by
// "***": what a page, a log line or an error may show of a catalog URL.
std::string RedactCatalogUrl(std::string_view url);

// Opens (creating if needed, and migrating) the catalog at `url`:
//   /path/catalog.sqlite, sqlite:///path/catalog.sqlite   SQLite
//   postgresql://user:password@host:port/db?...           PostgreSQL (also
//                                                         postgres://)
//   none                                                  no catalog: null
// An unreachable server, a refused password or a schema newer than this
// build are errors that name the database; a SQLite file's missing folders
// are created.
Result<std::unique_ptr<Catalog>> OpenCatalog(
    std::string_view url, const CatalogOptions& options = {});

// Opens the catalog a job records its saves in (the Python API's
// `catalog=`, the demo trainer's --catalog). A job needs no catalog to save
// or resume: storage alone does both. So unless `required`, a catalog that
// cannot be opened (unreachable, locked past the timeout, not a database, a
// newer schema) is one warning, and the result is null: the job runs
// without it, and `ckpt catalog sync ROOT` records its checkpoints later. A
// wrong URL or login (InvalidArgument: no sync could help) is an error
// either way, as is every failure when `required`.
Result<std::unique_ptr<Catalog>> OpenCatalogForJob(
    std::string_view url, bool required = false,
    const CatalogOptions& options = {});

}  // namespace ckpt
