// CheckpointManager: the user's entry point. Open a root, Save a State under a
// step, Load the newest complete one back, bit for bit.
//
//   // create_root: the job's first run finds an empty root, not NotFound.
//   auto mgr = ckpt::CheckpointManager::Open("file:///data/run42",
//                                            {.create_root = true}).value();
//   ckpt::State state;
//   state.AddTensor("weights", ckpt::View(weights));
//   if (auto last = mgr->Latest(); last.ok() && *last) mgr->Load(**last,
//   state);
//   ... train ...
//   mgr->Save(step, state, {.epoch = epoch});
//
// Promises. A Save either commits the whole step or leaves storage as it was
// (plus garbage that GarbageCollect removes): the manifest, written last with
// create-if-absent, is the commit. Load checks every chunk it reads against
// its xxh3-128 checksum and fails with DataLoss rather than return a wrong
// byte; a load either completes at one step or changes nothing, and a
// resume lands on the newest step that loads whole, and saving that
// step's number again replaces the damaged one (Save). Nothing a manager
// deletes is anything it did not write.
//
// Threads. A manager serializes its own calls (one Save or Load at a time);
// use one manager per root per process. Many processes may read one root;
// one job (its coordinator) writes it.
//
// Asynchronous save. SaveAsync copies the state into staging memory the
// manager keeps (allocated once, reused by every later SaveAsync) and returns
// once the copy is done; the caller may then change its tensors (with
// SaveOptions::stage_in_background it returns at once, and the caller waits
// for the copy with WaitStaged()). Writing and
// committing go on in a background thread. At most one save is in flight:
// while it is, every other call of the manager (Save, SaveAsync, Load, List,
// ...) first waits for it to end, except a SaveAsync under
// AsyncSavePolicy::kSkip. An error of a background save is returned by the
// handle's Wait(); one that no Wait() collected is returned, once, by the
// next Save or SaveAsync, which then saves nothing (so that it is not
// lost); destroying the manager waits for the save in flight. With
// MPI the save's collectives run on the background thread: initialize MPI
// with MPI_THREAD_SERIALIZED or more.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/catalog.h"
#include "ckpt/communicator.h"
#include "ckpt/state.h"
#include "ckpt/status.h"
#include "ckpt/storage.h"

namespace ckpt {

// Which committed checkpoints to keep. Every rule is off by default, and then
// nothing is ever deleted. When any rule is on, a checkpoint is deleted once
// no rule keeps it; the newest committed checkpoint is always kept.
struct RetentionPolicy {
  // Keep the newest N checkpoints (0: rule off).
  int keep_last = 0;
  // Keep every checkpoint whose step is a multiple of K (0: rule off).
  int64_t keep_every_n_steps = 0;
  // Keep the first checkpoint of every window of S seconds (0: rule off),
  // like "keep one checkpoint every H hours".
  int64_t keep_every_seconds = 0;
  // Keep the M best checkpoints by the metric `best_metric` (0: rule off).
  // Checkpoints without the metric are never "best".
  int keep_best = 0;
  std::string best_metric = {};
  bool best_higher_is_better = false;  // default: lower is better (a loss)

  bool enabled() const {
    return keep_last > 0 || keep_every_n_steps > 0 || keep_every_seconds > 0 ||
           keep_best > 0;
  }
};

// What SaveAsync does while an earlier asynchronous save is still running.
enum class AsyncSavePolicy {
  kWait,  // wait for it to end, then stage and start the new one
  // Return at once with SaveResult::skipped. Only a single process can skip
  // safely (ranks would have to agree); with more than one rank it waits.
  kSkip,
};

// Lossless compression of the chunks a save writes (docs/format.md,
// "Compressed chunks"; docs/design.md, "Compression"). Loads, verify,
// export and the tiers read compressed chunks whatever a manager's setting.
struct Compression {
  enum class Mode {
    // Every byte written as it is (the default).
    kOff,
    // Each chunk of a host tensor or blob split into byte planes of its
    // element (a float's exponent bytes apart from its mantissa bytes) and
    // compressed with zstd at `level`; a chunk that does not shrink is
    // stored raw. The rank's chunks are compressed on the I/O threads
    // (Options::io_threads) before its data object is written. Tensors on
    // a device are first copied into the staging memory and compressed
    // from there, as host ones.
    kZstd,
    // kZstd where the storage is slower than compressing would make up
    // for, raw elsewhere: decided per save and per rank from this
    // manager's measured write speed and compression speed and ratio
    // (docs/design.md, "Compression" gives the rule).
    kAuto,
  };
  Mode mode = Mode::kOff;
  // zstd's level: -7 (fastest) to 19 (smallest). 1 compresses at several
  // hundred MB/s a thread; higher levels gain little on weights.
  int level = 1;
};

// When a Save asked to be incremental (SaveOptions::incremental) writes a
// full, self-contained checkpoint instead. A full save starts a new chain.
struct IncrementalPolicy {
  // Every Kth save of a chain is full: one full save, then K-1 incremental
  // ones (0: rule off).
  int full_every = 0;
  // At most this many incremental saves in a row (0: the format's limit of
  // 64, which always applies).
  int max_chain = 0;
  // Full when the bytes an incremental save could reference fall below this
  // fraction of the state's bytes: so little is unchanged that a dependency
  // is not worth it (0: rule off).
  double min_referenced_fraction = 0;
};

struct Options {
  // --- What happens ---------------------------------------------------------
  // Identifies the job in manifests (and the catalog). Default: the root's
  // URL as the catalog writes it (file:// and the absolute path for a
  // local root); a job id given as a path is written the same way
  // (CatalogJobId, ckpt/catalog_sync.h).
  std::string job_id = {};
  // Applied by the coordinator after every successful Save.
  RetentionPolicy retention = {};
  // A Save less than this many seconds after the previous committed one is
  // skipped (SaveResult::skipped); 0 saves every time.
  double min_seconds_between_saves = 0;
  // Remove dead attempts' objects after every successful Save.
  bool gc_after_save = true;
  // Without a lease (lease_seconds 0), objects of an unfinished attempt
  // younger than this are left alone by GarbageCollect, unless their step is
  // at or below the newest committed one. Holding the lease, GarbageCollect
  // needs no guess: no other party can be writing, so every attempt no
  // manifest names is dead.
  int64_t gc_grace_seconds = 3600;
  // When an incremental save writes everything anyway.
  IncrementalPolicy incremental = {};
  // A root is made by a save, never by a read. With `create` (the default)
  // a file:// root that does not exist is created by the first Save, and
  // until then every call that reads it (Latest, List, Load, LoadAll,
  // LoadRankLocal, Describe, Verify, Delete, GarbageCollect) fails with
  // NotFound naming its path: a mistyped path is an error, not a new job
  // that resumes from nothing. Opening creates nothing. Without `create`
  // (read-only tools) Open itself fails with NotFound. Other schemes are
  // opened as they are (mem:// creates its namespace; s3:// has no folders).
  bool create = true;
  // Create the root at Open (with `create`): the first run of a job, whose
  // Latest() is then nullopt. The job runner and TieredManager's durable
  // root open so; a manager that only resumes should not.
  bool create_root = false;

  // --- Who writes -----------------------------------------------------------
  // One party writes a root at a time (docs/concurrency.md). The coordinator
  // takes the root's lease at its first Save, Delete or GarbageCollect,
  // renews it every third of this period while the manager lives, and gives
  // it back when the manager is destroyed; a commit whose lease was taken
  // over fails and commits nothing. A party that finds the lease held waits
  // up to lease_wait_seconds for it to free (a holder that died frees it
  // when it expires, at once if it died on this host), then fails with
  // FailedPrecondition naming the holder. Loads never take it; `ckpt
  // delete`, `gc` and `import` take it too. 0 turns ownership off: no
  // lease, and one writer per root is the caller's promise.
  double lease_seconds = 60;
  // -1: lease_seconds + 10, so a job restarted elsewhere after a crash
  // outwaits the lease its dead incarnation left.
  double lease_wait_seconds = -1;
  // Take the lease whoever holds it (`--break-lease`), for a holder known
  // dead that cannot be waited for; a live holder's next commit then fails.
  bool break_lease = false;
  // The ranks of the job; null means a single process. Not owned.
  Communicator* communicator = nullptr;
  // Where the coordinator records every committed checkpoint, and marks the
  // ones retention or Delete remove (ckpt/catalog.h); null: no catalog, the
  // library's default. `ckpt import`, `gc` and `delete` open
  // OpenCatalog(DefaultCatalogUrl()) unless given --catalog; a job opens
  // its own with OpenCatalogForJob (one that cannot be opened is a
  // warning); the job runner opens none: it asks this one, when there is
  // one, where to resume (RunnerOptions::resume_from_catalog). A catalog
  // failure never fails a save, and holds it up one catalog timeout at
  // most: the commit stands, the error is logged as one warning, and the
  // next save (or `ckpt catalog sync`) writes what the catalog missed.
  // Loads never consult it. Shared: one catalog may serve many managers.
  std::shared_ptr<Catalog> catalog = nullptr;

  // --- How fast -------------------------------------------------------------
  // Bytes per checksummed chunk (at least 4096). Smaller chunks localize
  // damage and let incremental saves skip more; larger ones shrink manifests.
  uint64_t chunk_size = uint64_t{4} << 20;
  // How a save records what it wrote (docs/format.md). kIndexed (manifest
  // version 3): a small commit record, a binary directory and one binary
  // index per rank, written by the ranks in parallel, so a rank that loads
  // reads only the indexes its boxes need: at 16,384 ranks, under 1 MB
  // instead of every rank's chunk list. kJson: one JSON manifest listing
  // every chunk (versions 1 and 2), for readers that predate version 3.
  // Loads read every version whatever this says.
  enum class MetadataLayout { kIndexed, kJson };
  MetadataLayout metadata_layout = MetadataLayout::kIndexed;
  // Threads that read data objects at once (the calling one included); a
  // large tensor is read in slabs of 4 chunks by several of them.
  int io_threads = 4;
  // Compression of the chunks every save writes; SaveOptions::compression
  // overrides it for one save.
  Compression compression = {};
  // What SaveAsync does while a save is in flight.
  AsyncSavePolicy async_policy = AsyncSavePolicy::kWait;
  // Most bytes of staging memory the manager keeps, for SaveAsync (tensors
  // and blobs of the state, each rounded up to 64 bytes) and for the reads
  // of all-or-nothing loads (LoadOptions::transactional); 0: as many as the
  // state needs. A state larger than this is saved by SaveAsync
  // synchronously, straight from the caller's buffers (SaveAsync then
  // returns a handle that is done), and loaded by checking its chunks in the
  // objects' views, or, from storage without views (s3://), through staging
  // memory unmapped when the load is done.
  uint64_t async_staging_bytes = 0;
  // Bytes of staging memory to map and fault in on a background thread at
  // Open, on every rank (StagingBytes of the state a SaveAsync will be
  // given, or more): the first SaveAsync of a process then copies into
  // memory already touched and stalls about as briefly as the later ones,
  // instead of paying to fault in fresh pages on the caller's thread. It
  // costs that memory from Open on; a SaveAsync made before the background
  // work ends stops it and takes the memory as it is (its copy faults in the
  // pages left, on every core) rather than waiting. 0 (the default): the
  // first SaveAsync maps it. All-or-nothing loads use the same memory
  // (LoadOptions::transactional): given here, a resume's first load reads
  // into memory already faulted in instead of faulting it as it reads.
  uint64_t async_staging_prepare_bytes = 0;

  // --- Tests ----------------------------------------------------------------
  // The clock, in milliseconds since 1970; default the system clock.
  std::function<int64_t()> now_unix_ms = {};
};

// Per-save information, stored in the manifest.
struct SaveOptions {
  int64_t epoch = -1;  // -1: not given
  // e.g. {"loss", 0.31}. One that is not finite (a diverged loss) is left
  // out of the manifest, with a warning: the save goes on.
  std::map<std::string, double> metrics = {};
  std::map<std::string, std::string> metadata = {};  // free-form
  // Write only what changed since the newest committed checkpoint (the
  // parent): a chunk whose bytes equal the same chunk of the parent (same
  // entry, same piece box, same byte range, same chunk size) is referenced in
  // the new manifest instead of written. The new checkpoint depends on the
  // checkpoints it references; retention keeps them while it is kept.
  // Options::incremental says when a full save is written instead.
  bool incremental = false;
  // With `incremental`: rows [first, second) of dimension 0 (global
  // coordinates) of a tensor that may have changed since this manager's
  // previous successful Save, by tensor name. Chunks of a listed tensor
  // outside these rows are referenced without being read or hashed (the
  // caller vouches that they did not change), chunks touching them are
  // written. Tensors not listed are compared chunk by chunk, and so is every
  // tensor when the parent is not that previous save (it was deleted since,
  // or this process has not saved yet). Each rank passes the rows of the
  // pieces it holds.
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> dirty_rows =
      {};
  // SaveAsync only: return at once and copy the state into the staging
  // memory on the background thread (device tensors on ckpt's streams), so
  // the copy overlaps the caller's next forward and backward pass. The
  // caller must keep the State and every buffer it names alive and
  // unchanged until the handle's WaitStaged() returns (before its optimizer
  // step). Default: SaveAsync returns once the copy is done.
  bool stage_in_background = false;
  // This save's compression, instead of Options::compression.
  std::optional<Compression> compression = std::nullopt;
};

struct LoadOptions {
  // Fail when the checkpoint holds entries the State does not ask for.
  bool strict = false;
  // All or nothing (the default): every tensor chunk is checked against
  // its checksum before any byte of the caller's changes, blobs and
  // metadata are collected, and only once everything is whole (on every
  // rank) are the caller's tensors, blobs and metadata changed. Host
  // tensors' chunks are read into the manager's staging memory, checked
  // there and copied into the tensors: from a file:// root on a disk whose
  // objects are not in the page cache (a resume: read with O_DIRECT at the
  // disk's speed), from storage without object views (s3://, a
  // StorageWrapper), and from tmpfs or mem:// when the manager already
  // holds staging memory for every tensor. The manager keeps that memory
  // (this rank's tensor bytes) and reuses it for later loads and SaveAsync;
  // a load maps it only where it takes at most half the memory the machine
  // has free (MemAvailable) and at most Options::async_staging_bytes (where
  // set). Otherwise each chunk is checked where it lies
  // (the page cache, mem://'s buffers: object views) and then copied: no
  // memory of the load's own, and no disk read where the objects lie in
  // the page cache. Device tensors always go through the staging memory. false:
  // host tensors are read straight into their buffers; a failure while
  // reading may then leave them partly written, and its error names every
  // entry that may have changed.
  bool transactional = true;
  // Every byte read once (docs/design.md, "Every byte read once"): with
  // many ranks, a chunk that several ranks need (a replicated tensor, a
  // piece that several new boxes of a reshard meet) is read from storage by
  // one of them and sent to the others through the communicator. It pays
  // where reads cross a link a node's ranks share (a network file system,
  // an object store) and the network between ranks is not slower: a node
  // then reads its share of a replicated state once, not once a rank. It
  // does not pay where a byte read again costs less than a byte sent (from
  // a local disk's page cache, from memory). kAuto (the default) reads
  // once where the ranks share a chunk, every rank's communicator can send
  // from rank to rank, every rank's storage reads over a link
  // (StorageCapabilities::local_reads false: s3://, a file:// root on a
  // network file system, NewRateLimitedStorage pacing reads), not every
  // rank is on one host over a storage that hands objects over in place,
  // and what the ranks measure says so: each times the first 8 MiB of its
  // share from storage and a message of up to 8 MiB to another rank, and
  // the rest goes rank to rank unless storage measures more than twice as
  // fast (a message measures the way slower than the exchange's batches
  // run). Where every rank needs the same chunks (a replicated state),
  // the ranks of a host hold them once for all, in a file in /dev/shm (up
  // to the state's size a host, taken before the first read and gone when
  // the load is; where /dev/shm has no room, each rank holds its own), and
  // only one rank a host exchanges. kOn reads once
  // wherever the ranks share a chunk and can send, without measuring; kOff
  // has every rank read all it needs itself. The environment variable
  // CKPT_READ_ONCE=off turns it off for every load of the process, kOn's
  // too. Reading once, a rank holds the chunks it needs in memory of the
  // load's own (up to this rank's part of the state, whatever
  // Options::async_staging_bytes says, until the load is done); holding
  // them all, the load checks its host tensors' chunks there and copies
  // them once, without staging memory.
  enum class ReadOnce { kAuto, kOff, kOn };
  ReadOnce read_once = ReadOnce::kAuto;
};

// A committed checkpoint, as `ckpt ls` shows it.
// How long the save of a checkpoint took, as its coordinator recorded it in
// the commit record (docs/format.md, `timing`). Checkpoints saved before
// ckpt recorded it, or copied by a tier, have `recorded` false.
struct RankSaveTiming {
  int rank = 0;
  int64_t write_ms = 0;  // writing its data object (and index)
  // In the save before its write began: the decision, the plan and the
  // lease, which wait for every rank to arrive.
  int64_t wait_ms = 0;
};
struct SaveTiming {
  bool recorded = false;
  // The coordinator's save, from the call (an asynchronous save: from the
  // start of its background work) to the commit record written.
  int64_t save_ms = 0;
  // Of which the commit: the manifest (or directory) built and written.
  int64_t commit_ms = 0;
  // How long the caller was held: the whole save, or for an asynchronous
  // save the copy into staging memory.
  int64_t stall_ms = 0;
  bool async = false;
  // Every rank's, for up to 256 ranks; of a larger world the 256 slowest
  // writers. Sorted by rank.
  std::vector<RankSaveTiming> ranks;
};

// Whether an entry named `name` is one a binding keeps for itself beside
// the user's state, named __NAME__ (the Python package's __python_tree__,
// which rebuilds the state's containers): `ckpt show` lists such entries
// only with --all, and CheckpointInfo counts them apart.
bool IsInternalEntryName(std::string_view name);

struct CheckpointInfo {
  int64_t step = 0;
  int64_t epoch = -1;
  int64_t created_unix_ms = 0;
  std::string job_id;
  int world_size = 1;
  std::vector<std::string> hosts;
  uint64_t bytes = 0;               // data objects this checkpoint wrote
  std::vector<int64_t> depends_on;  // steps it references
  uint64_t referenced_bytes = 0;    // of objects of the steps it references
  // Incremental saves: the checkpoint it was compared with (-1: a full save)
  // and how many incremental saves in a row led to it (0: a full save).
  int64_t parent = -1;
  int64_t chain = 0;
  std::map<std::string, double> metrics;
  std::map<std::string, std::string> metadata;
  // The entries saved, as `ckpt show` lists them; and beside them those a
  // binding keeps for itself (IsInternalEntryName: the Python package's
  // __python_tree__), which `ckpt show --all` lists too.
  size_t num_entries = 0;
  size_t internal_entries = 0;
  // Empty when every data object the manifest names is present with its
  // recorded size (one listing of the root, no data read); otherwise what
  // is missing, e.g. "data object step-... is missing". Latest() and
  // resume skip such a step; `ckpt ls` marks it.
  std::string incomplete;
  SaveTiming timing;
};

struct EntryInfo {
  std::string name;
  int owner = -1;  // the rank of a rank-local entry; -1 for the job's
  EntryKind kind = EntryKind::kTensor;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  size_t num_pieces = 0;
  uint64_t bytes = 0;
  std::string json;  // metadata entries
  // Never empty: a hash of the entry's boxes and chunk checksums (tensors,
  // blobs) or of its JSON (metadata). Equal digests mean equal contents;
  // different digests may still hide equal contents saved with another
  // chunk size.
  std::string digest;
};

struct CheckpointDescription {
  CheckpointInfo info;
  std::vector<EntryInfo> entries;
  std::vector<ObjectInfo> objects;  // the data objects, with their sizes
  // Manifest version 3: the directory and every rank's index object.
  std::vector<ObjectInfo> metadata_objects;
};

struct SaveResult {
  bool skipped = false;                // min_seconds_between_saves said no
  CheckpointInfo info;                 // what was committed
  std::vector<int64_t> deleted_steps;  // removed by retention
  // The step was committed already but did not load whole, and this save
  // replaced it (CheckpointManager::Save); why it did not.
  bool replaced = false;
  std::string replaced_because;
};

struct LoadedCheckpoint {
  CheckpointInfo info;
  State state;  // owns its buffers
};

struct GcOptions {
  bool dry_run = false;  // report, delete nothing
  // Retention to apply; unset: the manager's Options::retention.
  std::optional<RetentionPolicy> retention = {};
};

// What deleting one checkpoint did (or, in a dry run, would do).
struct DeleteReport {
  // An object of the step's directory.
  struct Object {
    std::string key;
    uint64_t bytes = 0;
    // Kept and skipped objects: why (one of the kDelete* reasons below).
    std::string reason;
    // Kept as kDeleteNamedByCheckpoint by a delete alone: the checkpoints
    // whose manifests name it (a collection leaves it empty).
    std::vector<int64_t> named_by;
  };
  // A checkpoint that depended on this one, rewritten first
  // (DeleteOptions::rewrite_dependants): the bytes of this step's objects it
  // read, now copied into a new object in its own directory.
  struct Rewritten {
    int64_t step = 0;
    uint64_t bytes_copied = 0;
  };
  int64_t step = -1;
  bool dry_run = false;
  // True when this delete removed the manifest (it goes first, so from then
  // on the step is no checkpoint); false when another party had removed it
  // first (it is then under `skipped`).
  bool manifest_deleted = false;
  std::vector<Rewritten> rewritten;  // oldest first
  std::vector<Object> removed;       // the manifest first, then data objects
  uint64_t bytes_freed = 0;          // the bytes of `removed`
  std::vector<Object> kept;          // left in the step's directory
  std::vector<Object> skipped;       // meant to go, but already gone
};
// DeleteReport::Object::reason: another checkpoint's manifest names the
// object, so it stays with that checkpoint.
inline constexpr char kDeleteNamedByCheckpoint[] = "named_by_checkpoint";
// Not an object ckpt writes (a user's file in the step's directory): ckpt
// deletes only its own objects.
inline constexpr char kDeleteNotCkptObject[] = "not_ckpt_object";
// Listed, but gone when its delete came: another party (a collection, a
// delete of the same step) removed it first.
inline constexpr char kDeleteAlreadyGone[] = "already_gone";

struct GcReport {
  std::vector<int64_t> deleted_steps;        // checkpoints retention removed
  std::vector<std::string> deleted_objects;  // every key removed
  uint64_t bytes_freed = 0;
  // Each step of deleted_steps, in the order deleted (newest first): its
  // objects are among deleted_objects; the rest of deleted_objects are dead
  // attempts' objects.
  std::vector<DeleteReport> step_reports;
};

struct DeleteOptions {
  // When other checkpoints depend on the one deleted, copy the bytes they
  // reference into their own step directories and rewrite their manifests
  // first (the `--force` of `ckpt delete`); otherwise such a delete fails
  // with FailedPrecondition naming them.
  bool rewrite_dependants = false;
  // Report what the delete would do, rewrite and delete nothing (it takes
  // no lease). With rewrite_dependants, the report's `rewritten` says how
  // many bytes each dependant would copy.
  bool dry_run = false;
};

struct VerifyReport {
  int64_t step = 0;
  uint64_t chunks_checked = 0;
  uint64_t bytes_checked = 0;
  // One line per problem: the object, the entry and what is wrong.
  std::vector<std::string> problems;
  // Some problem is a read that failed for want of access or by an I/O
  // error, not damage: a resume stops at such a step with that error
  // rather than skip it for an older one (as it skips damage).
  bool unreadable = false;
  // Every problem lies in data objects' safetensors headers, which a load
  // does not read (it reads chunks at the manifest's offsets and checks
  // their checksums): a resume loads this step bit for bit all the same,
  // but other safetensors readers may not open those objects.
  bool header_only = false;
  bool ok() const { return problems.empty(); }
};

// Whether a resume (LoadLatest and its kin) skips a step whose reading
// failed with `s` for an older one: damage (DataLoss) or an object gone
// (NotFound: a step deleted since the listing). Any other failure (no
// access, an I/O error) stops the resume there with that error, since an
// older step would only hide it. VerifyReport::unreadable, and `ckpt
// verify`, tell the two apart by this rule.
bool ResumeSkips(const Status& s);

// A step deleted while a resume (or `ckpt verify`) reads it is no damage:
// it lists the steps again and starts over from the newest, at most this
// many times, so that a job deleting steps faster than they load cannot
// hold a reader for ever.
inline constexpr int kResumeMostRelistings = 16;

// The outcome of a SaveAsync, delivered later. Copies share one outcome;
// a handle stays valid after its manager is gone. Thread-safe.
namespace internal {
struct SaveHandleState;
}  // namespace internal

class SaveHandle {
 public:
  // A handle of no save: Done() is true and Wait() fails.
  SaveHandle() = default;

  // The step being saved (-1 for a handle of no save).
  int64_t step() const;
  // True once the save has ended (Wait will not block).
  bool Done() const;
  // Blocks until the save has committed or failed and returns its result;
  // every call returns the same one. Every rank gets the same result.
  Result<SaveResult> Wait() const;
  // Blocks until the state has been copied into the staging memory, after
  // which the caller may change its tensors (at once, unless the save was
  // started with SaveOptions::stage_in_background). Returns the copy's
  // error, which Wait() reports too; a save that ended without copying
  // (refused, or saved synchronously) returns its own error or Ok.
  Status WaitStaged() const;

 private:
  friend class CheckpointManager;
  explicit SaveHandle(std::shared_ptr<internal::SaveHandleState> shared)
      : shared_(std::move(shared)) {}
  // The outcome the background thread fills in.
  std::shared_ptr<internal::SaveHandleState> shared_;
};

// The name LoadAll gives rank `rank`'s value of rank-local entry `name`:
// "name@rank00003".
std::string RankLocalName(std::string_view name, int rank);

// Progress of long operations (bytes done, bytes total). Called from the
// thread that called the operation, never from two threads at once.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

class CheckpointManager {
 public:
  // Opens the root at `url`: file:// (its path percent-encoded: "a%20b"
  // is "a b"), s3://BUCKET/PREFIX (S3Options from the environment;
  // docs/s3.md), mem://, or a plain path (taken as it is). A caller that
  // sets S3Options itself opens the storage (OpenStorage) and passes it.
  static Result<std::unique_ptr<CheckpointManager>> Open(std::string_view url,
                                                         Options options = {});
  // Opens a root on a storage the caller built (a wrapper, a custom backend).
  static Result<std::unique_ptr<CheckpointManager>> Open(
      std::unique_ptr<Storage> storage, Options options = {});

  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  // Saves `state` as `step`, on every rank together. AlreadyExists if the
  // step is committed and loads whole. A committed step that does not (a
  // load of this manager skipped it as damaged, or, not known, a verify of
  // every chunk on the coordinator finds damage) is replaced, atomically:
  // readers see the old checkpoint or the new one, never neither. Only a
  // manager holding the root's lease replaces (with lease_seconds 0 it is
  // AlreadyExists); it logs a warning naming the step and why, and the
  // result says so (SaveResult::replaced). Every rank returns the same
  // result.
  Result<SaveResult> Save(int64_t step, const State& state,
                          const SaveOptions& options = {});
  // Saves `state` as `step` in the background (see "Asynchronous save"
  // above): returns once the state is copied into staging memory. All ranks
  // call it for the same steps. The returned handle is never invalid; an
  // error (including a bad state) is reported by its Wait().
  SaveHandle SaveAsync(int64_t step, const State& state,
                       const SaveOptions& options = {});

  // Fills the entries of `state` from `step` in place: tensors must match
  // dtype and shape; blobs and metadata are replaced. A load either
  // completes at one step or changes nothing (LoadOptions::transactional):
  // every check that needs no data (entries, dtypes, shapes, object sizes)
  // runs first, then every chunk is checked against its checksum, and the
  // caller's state changes only once all of it (on every rank) is whole
  // (LoadOptions::transactional says how): with many ranks, every rank calls
  // Load
  // together. NotFound names an entry the checkpoint lacks.
  //
  // Resume (`step` nullopt): the committed steps are tried newest first,
  // on every rank together. A step that does not load whole because it is
  // damaged (DataLoss: a checksum mismatch, a missing or truncated object, a
  // damaged manifest or index) is skipped with a warning naming it and why,
  // and the next older one is tried; the load fails only when none loads,
  // naming every step tried and its error. A mismatch between the state and
  // the checkpoint (a missing entry, another shape or dtype, `strict`) fails
  // at once: an older step would not fit either. A step asked for by number
  // never falls back. Latest() differs: it names the newest step complete
  // by a listing, without reading its data, so a resume may land below it.
  Result<CheckpointInfo> Load(std::optional<int64_t> step, State& state,
                              const LoadOptions& options = {});
  // Loads every entry (or just the global entries `names`) into a State that
  // owns the buffers; tensors saved in pieces come back whole, rank-local
  // entries come back once per rank as RankLocalName(name, rank). Nothing
  // of the caller's changes on failure; nullopt falls back past damaged
  // steps as Load does.
  Result<LoadedCheckpoint> LoadAll(std::optional<int64_t> step,
                                   const std::vector<std::string>& names = {});
  // Every rank's value of the rank-local entry `name`, in a State whose
  // entries are named by the saving rank ("0", "1", ...). For a job resumed
  // on another number of ranks, which must merge them (a data-loader
  // position, say) itself.
  Result<LoadedCheckpoint> LoadRankLocal(std::optional<int64_t> step,
                                         std::string_view name);

  // The newest committed step whose manifest validates and whose objects a
  // listing shows with their recorded sizes; nullopt if none. No data is
  // read: a step with a damaged chunk is still Latest(), and Load(nullopt)
  // then resumes from an older one.
  Result<std::optional<int64_t>> Latest();
  // Every committed checkpoint, oldest first. Damaged manifests are skipped
  // (with a warning); `Verify` reports them.
  Result<std::vector<CheckpointInfo>> List();
  Result<CheckpointDescription> Describe(std::optional<int64_t> step);
  // Re-reads every byte of `step` and checks every checksum and the data
  // files' safetensors headers.
  Result<VerifyReport> Verify(int64_t step, const ProgressFn& progress = {});
  // Deletes a committed checkpoint (manifest first, so a crash leaves
  // garbage, never a half-deleted checkpoint that looks complete), and
  // reports what went, what stayed in its directory and why, and which
  // dependants were rewritten. An error names the root, the step and the
  // operation; the report comes only with success.
  Result<DeleteReport> Delete(int64_t step);
  Result<DeleteReport> Delete(int64_t step, const DeleteOptions& options);
  // Applies retention and removes dead attempts' objects.
  Result<GcReport> GarbageCollect(const GcOptions& options = {});

  Storage& storage();
  const Options& options() const;

 private:
  class Impl;
  // The door of the layers above (checkpoint/manager_access.h): a tiered
  // manager's local-tier saves hold this manager's lease on the root.
  friend class ManagerAccess;
  explicit CheckpointManager(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ckpt
