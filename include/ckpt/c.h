/* ckpt's C API: the one stable binary boundary of the library.
 *
 * libckpt.so exports these functions and nothing else; the Python package
 * (ctypes) and any other language bind this header. No C++ exception or type
 * crosses it.
 *
 * Conventions
 * - Objects are opaque handles, made by a create or open function and freed
 *   by its destroy or close function; passing NULL to those is a no-op.
 * - A call that can fail returns an int: CKPT_OK (0) or one of the error
 *   codes below. Its last parameter is `char** errptr`: on failure, when
 *   errptr is not NULL, *errptr receives the library's message (naming the
 *   object and the operation), to be freed with ckpt_free (a message
 *   already there is freed first). On success *errptr is left as it was.
 *   A call that makes a handle and can fail returns it through an out
 *   parameter, which is set only on success.
 * - Records with many fields (a checkpoint's description, a save's result,
 *   catalog rows) come back as JSON text in a buffer the caller frees with
 *   ckpt_free; each function says which fields the object has. Fields may be
 *   added in later versions of the same ABI; none is removed or changed.
 * - Steps are 0 to 999,999,999,999. Where a function takes a step to read,
 *   CKPT_NEWEST (-1) means the newest complete checkpoint.
 * - Buffers passed in (tensor data, blob bytes) are borrowed, not copied:
 *   they must stay valid, and for a save unchanged, until the call that uses
 *   them returns (for ckpt_manager_save_async: until it returns, since it
 *   copies the state before returning).
 * - Every call that does I/O blocks the calling thread only; calls on one
 *   manager are serialized by the library. Handles may be used from any
 *   thread, one call at a time per state.
 *
 * Example (error handling shortened):
 *
 *   char* err = NULL;
 *   ckpt_options_t* opts = ckpt_options_create();
 *   ckpt_options_set(opts, "keep_last", "3", &err);
 *   ckpt_manager_t* m = NULL;
 *   ckpt_manager_open("file:///data/run42", opts, &m, &err);
 *   ckpt_options_destroy(opts);
 *   float w[6] = {0};
 *   int64_t shape[2] = {2, 3};
 *   ckpt_entry_t e = {.name = "w", .kind = CKPT_KIND_TENSOR, .dtype = "F32",
 *                     .ndim = 2, .shape = shape, .data = w,
 *                     .nbytes = sizeof w};
 *   ckpt_state_t* s = ckpt_state_create();
 *   ckpt_state_add(s, &e, 1, 0, &err);
 *   ckpt_manager_save(m, 7, s, NULL, NULL, &err);
 *   ckpt_state_destroy(s);
 *   ckpt_manager_close(m);
 */
#ifndef CKPT_C_H_
#define CKPT_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CKPT_EXPORT __attribute__((visibility("default")))
#else
#define CKPT_EXPORT
#endif

/* The ABI version: part of the library's SONAME (libckpt.so.1). It changes
 * only when a function or struct of this header changes incompatibly. */
#define CKPT_ABI_VERSION 1

/* Status codes (the C++ library's ckpt::ErrorCode). */
enum {
  CKPT_OK = 0,
  CKPT_INVALID_ARGUMENT = 1,
  CKPT_NOT_FOUND = 2,
  CKPT_ALREADY_EXISTS = 3,
  CKPT_DATA_LOSS = 4,
  CKPT_IO_ERROR = 5,
  CKPT_UNAVAILABLE = 6,
  CKPT_ABORTED = 7,
  CKPT_FAILED_PRECONDITION = 8
};

/* The newest complete checkpoint, where a step to read is asked for. */
#define CKPT_NEWEST (-1)

/* The library's version ("0.1.0"), and the ABI version it was built with:
 * a program that binds at run time compares the latter with
 * CKPT_ABI_VERSION. */
CKPT_EXPORT const char* ckpt_version(void);
CKPT_EXPORT int ckpt_abi_version(void);

/* The name of a status code ("DataLoss"; "OK"; "Unknown" for other values). */
CKPT_EXPORT const char* ckpt_code_name(int code);

/* Frees a buffer this library returned (error messages, JSON text). */
CKPT_EXPORT void ckpt_free(void* p);

/* ---------------------------------------------------------------- options */

/* Options of a manager; every one has a default (the C++ ckpt::Options). */
typedef struct ckpt_options_t ckpt_options_t;

CKPT_EXPORT ckpt_options_t* ckpt_options_create(void);
CKPT_EXPORT void ckpt_options_destroy(ckpt_options_t* options);

/* Sets one option from its text: an integer, a number, "true"/"false", or a
 * string, as the option needs. A name or value it does not know is
 * CKPT_INVALID_ARGUMENT naming both. The options (docs in
 * include/ckpt/checkpoint_manager.h):
 *   job_id                    string
 *   keep_last, keep_every_n_steps, keep_every_seconds, keep_best
 *                             integers >= 0 (retention; 0: rule off)
 *   best_metric               string
 *   best_higher_is_better     bool
 *   min_seconds_between_saves number
 *   gc_after_save             bool
 *   create                    bool (default true): a missing file:// root
 *                             is created by the first save, and reading it
 *                             before (latest, list, load, ...) is
 *                             CKPT_NOT_FOUND naming the path; false: the
 *                             root must exist, opening a missing one is
 *                             CKPT_NOT_FOUND
 *   create_root               bool (default false): create the root at
 *                             open, for a job's first run (latest then
 *                             finds no step)
 *   gc_grace_seconds          integer
 *   full_every, max_chain     integers (incremental saves)
 *   min_referenced_fraction   number in [0, 1]
 *   lease_seconds             number (0: no lease)
 *   lease_wait_seconds        number (< 0: the manager's default)
 *   break_lease               bool
 *   chunk_size, async_staging_bytes, async_staging_prepare_bytes
 *                             integers (bytes)
 *   io_threads                integer >= 1
 *   compression               "off" (the default), "zstd" (every chunk of a
 *                             host tensor in byte planes and zstd, raw
 *                             where that does not shrink it) or "auto"
 *                             (zstd where the storage is slower than the
 *                             compression makes up for)
 *   compression_level         integer, zstd's level: -7 to 19 (default 1)
 *   metadata_layout           "indexed" (manifest version 3, the default)
 *                             or "json" (versions 1 and 2, for readers
 *                             that predate version 3)
 *   catalog                   a catalog URL ("default": $CKPT_CATALOG, else
 *                             ~/.local/state/ckpt/catalog.sqlite; "": none),
 *                             opened by ckpt_manager_open
 *   catalog_required          bool: a catalog that cannot be opened fails
 *                             ckpt_manager_open (default: one warning, and
 *                             the job runs without it)
 */
CKPT_EXPORT int ckpt_options_set(ckpt_options_t* options, const char* name,
                                 const char* value, char** errptr);

/* ------------------------------------------------------------------ state */

/* What a checkpoint is made of: named entries, borrowing the caller's
 * buffers (see ckpt::State). */
typedef struct ckpt_state_t ckpt_state_t;

enum {
  CKPT_KIND_TENSOR = 0,  /* dtype + shape + bytes */
  CKPT_KIND_BLOB = 1,    /* bytes */
  CKPT_KIND_METADATA = 2 /* a JSON object's text */
};

enum {
  CKPT_PLACE_WHOLE = 0,      /* the whole entry; replicated when several
                                ranks add it */
  CKPT_PLACE_RANK_LOCAL = 1, /* this rank's own tensor or blob */
  CKPT_PLACE_PIECE = 2       /* this rank's box of a sharded tensor */
};

/* One entry, in (ckpt_state_add) or out (ckpt_state_get). */
typedef struct ckpt_entry_t {
  const char* name; /* UTF-8, the library's entry-name rules */
  int kind;         /* CKPT_KIND_* */
  int placement;    /* CKPT_PLACE_* */
  /* Tensors: a safetensors dtype name ("F32", "BF16", "I64", ...), the
   * number of dimensions and the shape (of this rank's box for a piece). */
  const char* dtype;
  int ndim;
  const int64_t* shape;
  /* Tensors: the C-contiguous little-endian bytes, nbytes = elements x
   * dtype size. Blobs: the bytes. Metadata: the JSON text (nbytes its
   * length). For a load, a tensor's buffer is where its bytes go; blobs
   * and metadata are placeholders (data may be NULL) that the load fills,
   * read back with ckpt_state_get. */
  void* data;
  uint64_t nbytes;
  /* Pieces: the global shape and this box's offsets, ndim each. */
  const int64_t* global_shape;
  const int64_t* offsets;
  /* ckpt_state_get only: the saving rank of a rank-local entry, else -1. */
  int owner;
} ckpt_entry_t;

CKPT_EXPORT ckpt_state_t* ckpt_state_create(void);
CKPT_EXPORT void ckpt_state_destroy(ckpt_state_t* state);

/* Adds n entries in one call (a 10,000-tensor state is one call). With
 * for_load nonzero the entries are targets of a load: tensors must be
 * writable memory. Names, dtypes, shapes and sizes are checked here; the
 * first bad entry fails the call with CKPT_INVALID_ARGUMENT naming it. A
 * state a call failed on holds only part of that call's entries, and every
 * save or load with it fails with that error: destroy it and build it
 * again. Metadata text and rank-local blobs
 * are copied; tensor buffers and other blobs are borrowed. */
CKPT_EXPORT int ckpt_state_add(ckpt_state_t* state, const ckpt_entry_t* entries,
                               size_t n, int for_load, char** errptr);

/* Adds n whole tensors (CKPT_KIND_TENSOR, CKPT_PLACE_WHOLE) in one call
 * from parallel arrays instead of one ckpt_entry_t each: the same entries,
 * checks and messages as ckpt_state_add, for a binding that pays for every
 * field it sets (Python's ctypes fills these arrays in bulk). `names` and
 * `dtypes` hold n NUL-terminated strings back to back ("w\0b\0"),
 * names_size and dtypes_size bytes in all; tensor i has ndims[i]
 * dimensions, whose lengths follow tensor i-1's in `shapes` (shapes_size
 * values in all; NULL when 0); data[i] and nbytes[i] are its buffer and
 * size. Strings or dimensions fewer or more than n tensors use are
 * CKPT_INVALID_ARGUMENT. */
CKPT_EXPORT int ckpt_state_add_tensors(ckpt_state_t* state, size_t n,
                                       const char* names, size_t names_size,
                                       const char* dtypes, size_t dtypes_size,
                                       const int* ndims, const int64_t* shapes,
                                       size_t shapes_size, void* const* data,
                                       const uint64_t* nbytes, int for_load,
                                       char** errptr);

/* Marks the state failed with `code` (a CKPT_* error, not CKPT_OK) and
 * `message`, as if an add had failed; an earlier error stays. A rank that
 * cannot build its state (a binding found bad input before the library saw
 * it) still saves with it: a many-rank save then fails on every rank with
 * this error, naming the rank, and commits nothing, instead of the other
 * ranks waiting for this one. */
CKPT_EXPORT int ckpt_state_set_error(ckpt_state_t* state, int code,
                                     const char* message, char** errptr);

/* Marks entry `index` (0-based, in the order added) as living on CUDA
 * device `device` (numbered as the CUDA driver numbers the devices this
 * process sees), or on the host with -1, the default. Its data pointer is
 * then a device address (a CUdeviceptr): a save copies the bytes into
 * page-locked host memory first (ckpt_manager_save_async returns once they
 * are copied), a load copies them to the device last. The CUDA driver
 * (libcuda.so.1, or the library CKPT_CUDA_DRIVER names) is loaded on the
 * first save or load of a device entry; without one that call fails with
 * CKPT_UNAVAILABLE naming the entry. Tensors only: a blob or a metadata
 * entry is CKPT_INVALID_ARGUMENT naming it. */
CKPT_EXPORT int ckpt_state_set_location(ckpt_state_t* state, size_t index,
                                        int device, char** errptr);

/* The caller's CUDA stream (a CUstream, on the device of the state's device
 * entries) that orders ckpt's copies: a save copies from the device after
 * the work queued on it so far, a load writes to the device after it too
 * and has finished when it returns. 0, the default: ckpt synchronizes each
 * device it copies from or to first (cuCtxSynchronize), which waits for all
 * the device's work. */
CKPT_EXPORT int ckpt_state_set_cuda_stream(ckpt_state_t* state, uint64_t stream,
                                           char** errptr);

CKPT_EXPORT size_t ckpt_state_size(const ckpt_state_t* state);

/* Entry i (0-based, in the order added). The pointers stay valid until the
 * state changes or is destroyed. */
CKPT_EXPORT int ckpt_state_get(const ckpt_state_t* state, size_t i,
                               ckpt_entry_t* out, char** errptr);

/* ----------------------------------------------------------- communicator */

/* The ranks of a many-rank job. Built from a table of functions, so that a
 * communicator written in any language (or in another shared library, as
 * libckpt_mpi.so's) can serve. Each function returns CKPT_OK or an error
 * code; on error it may write a message (NUL-terminated, at most errlen
 * bytes) into errbuf. */
typedef struct ckpt_bytes_list_t ckpt_bytes_list_t;

/* Appends one rank's (or the root's) bytes to a result list: what
 * all_gather calls once per rank, in rank order, and broadcast once. */
CKPT_EXPORT void ckpt_bytes_list_push(ckpt_bytes_list_t* list, const void* data,
                                      size_t size);

typedef struct ckpt_communicator_ops_t {
  int (*rank)(void* ctx);
  int (*size)(void* ctx);
  /* Writes this rank's host name into buf (NULL: the library's own). */
  int (*host_name)(void* ctx, char* buf, size_t len);
  int (*barrier)(void* ctx, char* errbuf, size_t errlen);
  /* Every rank contributes `mine`; push every rank's bytes to `out`. */
  int (*all_gather)(void* ctx, const void* mine, size_t size,
                    ckpt_bytes_list_t* out, char* errbuf, size_t errlen);
  /* Push `root`'s bytes (`data` on the root) to `out`. */
  int (*broadcast)(void* ctx, const void* data, size_t size, int root,
                   ckpt_bytes_list_t* out, char* errbuf, size_t errlen);
  /* Gives up on the group (NULL: nothing to do). */
  void (*abort)(void* ctx, const char* why);
  /* Frees ctx when the communicator is destroyed (NULL: nothing to do). */
  void (*destroy)(void* ctx);
} ckpt_communicator_ops_t;

typedef struct ckpt_communicator_t ckpt_communicator_t;

/* A communicator over `ops` (copied) and `ctx`. */
CKPT_EXPORT ckpt_communicator_t* ckpt_communicator_create(
    const ckpt_communicator_ops_t* ops, void* ctx);
/* A manager keeps its communicator alive: destroying the handle while a
 * manager uses it is safe. */
CKPT_EXPORT void ckpt_communicator_destroy(ckpt_communicator_t* comm);
CKPT_EXPORT int ckpt_communicator_rank(const ckpt_communicator_t* comm);
CKPT_EXPORT int ckpt_communicator_size(const ckpt_communicator_t* comm);
/* The host name (a buffer to free with ckpt_free). */
CKPT_EXPORT char* ckpt_communicator_host_name(const ckpt_communicator_t* comm);
CKPT_EXPORT int ckpt_communicator_barrier(ckpt_communicator_t* comm,
                                          char** errptr);

/* Point to point, for tiers' replication (ckpt_tiered_open with replicas >=
 * 1): sends `size` bytes of `data` to rank `dest` and pushes the one
 * message received from rank `source` to `out`, at once (as MPI_Sendrecv,
 * so ranks passing messages around a ring cannot deadlock). dest -1 sends
 * nothing; source -1 receives nothing and pushes nothing. Messages between
 * two ranks arrive in the order sent. */
typedef int (*ckpt_send_recv_fn)(void* ctx, const void* data, size_t size,
                                 int dest, int source, ckpt_bytes_list_t* out,
                                 char* errbuf, size_t errlen);

/* Gives a communicator of ckpt_communicator_create point to point (NULL:
 * none, the default: a tiered save with replicas then fails with
 * CKPT_UNAVAILABLE). Call it before a manager uses the communicator.
 * CKPT_INVALID_ARGUMENT for a communicator with its own (MPI's). */
CKPT_EXPORT int ckpt_communicator_set_send_recv(ckpt_communicator_t* comm,
                                                ckpt_send_recv_fn fn,
                                                char** errptr);

/* The communicator of a manager's options (NULL: one process). */
CKPT_EXPORT void ckpt_options_set_communicator(ckpt_options_t* options,
                                               ckpt_communicator_t* comm);

/* ---------------------------------------------------------------- catalog */

/* The catalog of committed checkpoints (SQLite file or PostgreSQL). */
typedef struct ckpt_catalog_t ckpt_catalog_t;

/* Opens (creating and migrating) the catalog at `url`: a path,
 * sqlite:///path, postgresql://...; "" or "default": $CKPT_CATALOG, else
 * ~/.local/state/ckpt/catalog.sqlite. NULL is CKPT_INVALID_ARGUMENT. */
CKPT_EXPORT int ckpt_catalog_open(const char* url, ckpt_catalog_t** out,
                                  char** errptr);
/* ckpt_catalog_open, creating a missing SQLite catalog (and its folders)
 * only when `create` is nonzero: with 0, a file that is not there is
 * CKPT_NOT_FOUND naming it (a query must not take a mistyped path for an
 * empty catalog). */
CKPT_EXPORT int ckpt_catalog_open_ex(const char* url, int create,
                                     ckpt_catalog_t** out, char** errptr);
CKPT_EXPORT void ckpt_catalog_close(ckpt_catalog_t* catalog);
/* The catalog's URL (valid while the catalog is open). */
CKPT_EXPORT const char* ckpt_catalog_url(const ckpt_catalog_t* catalog);

/* A manager records its saves in `catalog` (which it keeps alive). */
CKPT_EXPORT void ckpt_options_set_catalog(ckpt_options_t* options,
                                          ckpt_catalog_t* catalog);

/* Catalog rows as JSON. A checkpoint row is an object with job_id, root,
 * step, epoch, scheme, world_size, hosts (array), bytes, manifest_checksum,
 * metrics (object), created_unix_ms, state ("committed" or "deleted"),
 * tier ("durable", or "local": a step of a tiered manager's local tier, in
 * node memory). A job is an object with job_id, root, first_seen_unix_ms,
 * last_seen_unix_ms, committed, latest_step (of its durable checkpoints). */
/* Every job: an array of jobs. A `job` the queries below take is a job's
 * id, or a root given as a path ("/...", "./...", "../...", "file://..."):
 * the job that saved under that root, whatever its id, and that root's rows
 * alone (not the same job id's under another root); a root several jobs
 * saved into is CKPT_FAILED_PRECONDITION naming them. */
CKPT_EXPORT int ckpt_catalog_jobs(ckpt_catalog_t* catalog, char** json,
                                  char** errptr);
/* The job's newest committed durable checkpoint: a row, or null. */
CKPT_EXPORT int ckpt_catalog_latest(ckpt_catalog_t* catalog, const char* job,
                                    char** json, char** errptr);
/* The job's committed durable checkpoint with the lowest (highest, when
 * higher_is_better) `metric`: a row, or null. */
CKPT_EXPORT int ckpt_catalog_best(ckpt_catalog_t* catalog, const char* job,
                                  const char* metric, int higher_is_better,
                                  char** json, char** errptr);
/* Every committed durable checkpoint of the job with `metric`, best first
 * (as ckpt_catalog_best ranks them: its row is the first): an array of rows.
 * Where the best is gone from storage, the caller takes the next. */
CKPT_EXPORT int ckpt_catalog_ranked(ckpt_catalog_t* catalog, const char* job,
                                    const char* metric, int higher_is_better,
                                    char** json, char** errptr);
/* Whether the checkpoint a row names (its job_id, root, step and
 * manifest_checksum) is committed on storage as that commit: 0 when it is;
 * CKPT_NOT_FOUND when it is gone, CKPT_DATA_LOSS when its manifest is
 * damaged, CKPT_FAILED_PRECONDITION when it is another commit (the catalog
 * is stale: the message says to run `ckpt catalog sync`); other codes when
 * the storage cannot be asked (CKPT_UNAVAILABLE: nothing is known). */
CKPT_EXPORT int ckpt_catalog_check(const char* job, const char* root,
                                   int64_t step, const char* manifest_checksum,
                                   char** errptr);
/* Rows oldest step first, of `job` and/or `root` ("" or NULL: every one;
 * a root as a path or URL, however spelled), committed only unless
 * include_deleted, the newest `limit` (0: all). */
CKPT_EXPORT int ckpt_catalog_list(ckpt_catalog_t* catalog, const char* job,
                                  const char* root, int include_deleted,
                                  int64_t limit, char** json, char** errptr);

/* ---------------------------------------------------------------- manager */

typedef struct ckpt_manager_t ckpt_manager_t;

/* Opens the root at `url` (a path, file://, s3://BUCKET/PREFIX, mem://NAME)
 * with `options` (NULL: the defaults; the manager copies what it needs, so
 * the options may be destroyed at once). With a communicator, every rank
 * opens the same root. */
CKPT_EXPORT int ckpt_manager_open(const char* url,
                                  const ckpt_options_t* options,
                                  ckpt_manager_t** out, char** errptr);
/* Waits for a save in flight, gives the root's lease back, frees. */
CKPT_EXPORT void ckpt_manager_close(ckpt_manager_t* manager);

/* The root's URL (valid while the manager is open). */
CKPT_EXPORT const char* ckpt_manager_url(const ckpt_manager_t* manager);
CKPT_EXPORT int ckpt_manager_rank(const ckpt_manager_t* manager);
CKPT_EXPORT int ckpt_manager_world_size(const ckpt_manager_t* manager);

/* What a save records beside the state, and how it saves. */
typedef struct ckpt_save_options_t ckpt_save_options_t;

CKPT_EXPORT ckpt_save_options_t* ckpt_save_options_create(void);
CKPT_EXPORT void ckpt_save_options_destroy(ckpt_save_options_t* options);
/* -1: no epoch (the default). */
CKPT_EXPORT void ckpt_save_options_set_epoch(ckpt_save_options_t* options,
                                             int64_t epoch);
/* Nonzero: write only the chunks that differ from the newest checkpoint. */
CKPT_EXPORT void ckpt_save_options_set_incremental(ckpt_save_options_t* options,
                                                   int incremental);
/* Nonzero: ckpt_manager_save_async returns at once and copies the state on
 * the background thread, so the copy overlaps the caller's next step; the
 * caller keeps the state and its buffers alive and unchanged until
 * ckpt_save_wait_staged returns. */
CKPT_EXPORT void ckpt_save_options_set_stage_in_background(
    ckpt_save_options_t* options, int in_background);
/* This save's compression instead of the manager's: `mode` "off", "zstd"
 * or "auto", at zstd level `level` (-7 to 19; checked by the save). */
CKPT_EXPORT int ckpt_save_options_set_compression(ckpt_save_options_t* options,
                                                  const char* mode, int level,
                                                  char** errptr);
/* A metric (keep_best ranks by it; one that is not finite, a diverged
 * loss, is left out of the manifest by the save, with a warning) and a
 * free-form metadata pair. */
CKPT_EXPORT int ckpt_save_options_set_metric(ckpt_save_options_t* options,
                                             const char* name, double value,
                                             char** errptr);
CKPT_EXPORT int ckpt_save_options_set_metadata(ckpt_save_options_t* options,
                                               const char* key,
                                               const char* value,
                                               char** errptr);
/* The [first, end) row ranges (of dimension 0) of tensor `name` that may have
 * changed since this manager's previous save: n pairs in `ranges`
 * (first0, end0, first1, end1, ...). */
CKPT_EXPORT int ckpt_save_options_set_dirty_rows(ckpt_save_options_t* options,
                                                 const char* name,
                                                 const int64_t* ranges,
                                                 size_t n, char** errptr);

/* A save's result, as JSON: an object with skipped (bool), info (the
 * committed checkpoint, below), deleted_steps (retention's), replaced
 * (bool: the step was committed but did not load whole, and this save
 * replaced it) and replaced_because (why it did not; "" otherwise).
 *
 * A checkpoint's info: an object with step, epoch (-1: none),
 * created_unix_ms, job_id, world_size, hosts, bytes, depends_on,
 * referenced_bytes, parent (-1: a full save), chain, metrics, metadata,
 * num_entries (the entries saved, as `ckpt show` lists them),
 * internal_entries (a binding's own beside them, named __NAME__: the Python
 * package's __python_tree__), incomplete ("" when every data object is
 * present), timing
 * (null when the save recorded none; else save_ms, commit_ms, stall_ms,
 * async and ranks, an array of {rank, write_ms, wait_ms}: docs/format.md). */

/* Saves `state` as `step` on every rank together. options may be NULL.
 * result (may be NULL) receives the save's result. CKPT_ALREADY_EXISTS
 * when the step is committed and loads whole; one that does not (damaged:
 * a resume skipped it) is replaced atomically, with a warning, by a
 * manager that holds the root's lease (CheckpointManager::Save). */
CKPT_EXPORT int ckpt_manager_save(ckpt_manager_t* manager, int64_t step,
                                  const ckpt_state_t* state,
                                  const ckpt_save_options_t* options,
                                  char** result, char** errptr);

/* A save running in the background. */
typedef struct ckpt_save_t ckpt_save_t;

/* Copies `state` into the manager's staging memory and returns: the
 * caller's buffers are free again. The save then runs in the background;
 * errors come from ckpt_save_wait. NULL only when the manager or the state
 * is NULL, or memory for the handle ran out. */
CKPT_EXPORT ckpt_save_t* ckpt_manager_save_async(
    ckpt_manager_t* manager, int64_t step, const ckpt_state_t* state,
    const ckpt_save_options_t* options);
CKPT_EXPORT int64_t ckpt_save_step(const ckpt_save_t* save);
/* Nonzero once ckpt_save_wait would not block. */
CKPT_EXPORT int ckpt_save_done(const ckpt_save_t* save);
/* Blocks until the save has ended; its outcome (every call the same). */
CKPT_EXPORT int ckpt_save_wait(ckpt_save_t* save, char** result, char** errptr);
/* Blocks until the state has been copied into the staging memory (at once
 * unless the save was started with stage_in_background); the copy's error,
 * which ckpt_save_wait reports too. */
CKPT_EXPORT int ckpt_save_wait_staged(ckpt_save_t* save, char** errptr);
/* Frees the handle; the save itself goes on. */
CKPT_EXPORT void ckpt_save_destroy(ckpt_save_t* save);

/* Loads `step` into the entries of `state` (added with for_load): tensors
 * into their buffers, blobs and metadata into the state (read them with
 * ckpt_state_get). With strict, an entry of the checkpoint that the state
 * lacks is an error. info (may be NULL) receives the checkpoint's info.
 * A load either completes at one step or changes nothing: every chunk is
 * read into staging memory and checked before any buffer changes.
 * CKPT_NEWEST resumes: the committed steps are tried newest first, and a
 * damaged one (CKPT_DATA_LOSS) is skipped for the next older one; a state
 * that does not fit the checkpoint fails at once. */
CKPT_EXPORT int ckpt_manager_load(ckpt_manager_t* manager, int64_t step,
                                  ckpt_state_t* state, int strict, char** info,
                                  char** errptr);
/* ckpt_manager_load with the choice of transactional (nonzero, what
 * ckpt_manager_load does) or streaming (0: host tensors are read straight
 * into their buffers, with no staging memory; a failure midway may leave
 * them partly written and its message names the entries changed). */
CKPT_EXPORT int ckpt_manager_load_ex(ckpt_manager_t* manager, int64_t step,
                                     ckpt_state_t* state, int strict,
                                     int transactional, char** info,
                                     char** errptr);

/* Every saving rank's value of the rank-local entry `name`, at any world
 * size: *out receives a new state (free with ckpt_state_destroy) whose
 * entries are named by rank ("0", "1", ...) and own their bytes. */
CKPT_EXPORT int ckpt_manager_load_rank_local(ckpt_manager_t* manager,
                                             int64_t step, const char* name,
                                             ckpt_state_t** out, char** info,
                                             char** errptr);

/* The newest complete step into *step, or -1 when there is none. */
CKPT_EXPORT int ckpt_manager_latest(ckpt_manager_t* manager, int64_t* step,
                                    char** errptr);

/* Every committed checkpoint, oldest first: a JSON array of infos. */
CKPT_EXPORT int ckpt_manager_list(ckpt_manager_t* manager, char** json,
                                  char** errptr);

/* A checkpoint's entries: {"info": info, "entries": [entry...]}, an entry
 * being {name, owner (-1: the job's), kind ("tensor", "blob", "metadata"),
 * dtype, shape, num_pieces, bytes, json (metadata only)}. */
CKPT_EXPORT int ckpt_manager_describe(ckpt_manager_t* manager, int64_t step,
                                      char** json, char** errptr);

/* The same entries as columns, for a binding that pays for every object it
 * parses (a list of 10,000 strings parses several times faster than 10,000
 * objects): {"info": info, "names": [...], "owners": [...], "kinds": [...],
 * "dtypes": [...], "ndims": [...], "shapes": [every entry's dimensions, one
 * after another], "bytes": [...], "num_pieces": [...], "metadata": {"i":
 * json text of entry i, for each metadata entry}}; every list in entry
 * order, one item per entry (shapes: ndims[i] items for entry i). */
CKPT_EXPORT int ckpt_manager_describe_columns(ckpt_manager_t* manager,
                                              int64_t step, char** json,
                                              char** errptr);

/* Re-reads a checkpoint and checks every chunk: {step, chunks_checked,
 * bytes_checked, problems (array of strings; empty: intact), unreadable
 * (true when some problem is a read that failed, not damage: a resume
 * stops at such a step with that error rather than skip it), header_only
 * (true when every problem lies in data files' safetensors headers, which a
 * load does not read: a resume loads the step all the same)}. A damaged
 * checkpoint is a report with problems, not an error. */
CKPT_EXPORT int ckpt_manager_verify(ckpt_manager_t* manager, int64_t step,
                                    char** json, char** errptr);

/* Deletes the committed checkpoint `step`. Checkpoints that depend on it
 * are refused (CKPT_FAILED_PRECONDITION naming them) unless
 * rewrite_dependants, which first makes each of them self-contained. */
CKPT_EXPORT int ckpt_manager_delete(ckpt_manager_t* manager, int64_t step,
                                    int rewrite_dependants, char** errptr);

/* ckpt_manager_delete, with what it did: {step, dry_run, manifest_deleted,
 * removed (array of {key, bytes}: the manifest first), bytes_freed, kept and
 * skipped (arrays of {key, bytes, reason, named_by}: objects left in the
 * step's directory, reason "not_ckpt_object" or "named_by_checkpoint" with
 * the steps naming it; objects already gone, reason "already_gone"),
 * rewritten (array of {step, bytes_copied}: the dependants rewrite_dependants
 * rewrote), deleted_steps, deleted_objects}. With dry_run, changes nothing
 * and reports what it would do. */
CKPT_EXPORT int ckpt_manager_delete_report(ckpt_manager_t* manager,
                                           int64_t step, int rewrite_dependants,
                                           int dry_run, char** json,
                                           char** errptr);

/* Applies the retention policy and removes dead attempts' objects:
 * {deleted_steps, deleted_objects, bytes_freed, step_reports (one report of
 * ckpt_manager_delete_report per deleted step, in the order deleted: newest
 * first)}, as `ckpt gc --json` prints (which adds dry_run). With dry_run,
 * deletes nothing and reports what it would. */
CKPT_EXPORT int ckpt_manager_gc(ckpt_manager_t* manager, int dry_run,
                                char** json, char** errptr);

/* ------------------------------------------------------------------ tiers */

/* A local tier in front of a manager (ckpt/tiered.h, docs/tiers.md): every
 * local_every_steps steps each rank saves its share into local_url (a
 * node-local root, e.g. file:///dev/shm/run42; "{node}" in it becomes the
 * node's index) and copies it to `replicas` ranks on other nodes; every
 * durable_every_steps steps (0: never by interval) the same state also goes
 * to the manager's root. Restore resumes from the newest step either tier
 * holds whole. */
typedef struct ckpt_tiered_t ckpt_tiered_t;
#define CKPT_TIER_REPLICAS_AUTO (-1)
typedef struct ckpt_tier_save_t ckpt_tier_save_t;

/* Every rank opens the tiers with the same arguments, over a manager opened
 * with the job's communicator; the manager must outlive the tiers.
 * node_of_rank (n_nodes entries, one per rank, or NULL and 0) says which
 * node each rank runs on (default: the communicator's host names);
 * local_keep: marked local steps kept per folder (2 when 0);
 * replicas: copies of each share on other nodes, or CKPT_TIER_REPLICAS_AUTO
 * for what the job's nodes allow (1 on several nodes, 0 on one, noted in
 * the log);
 * replication_bytes_per_second: the most a rank sends to its peers when it
 * replicates (0: unpaced). */
CKPT_EXPORT int ckpt_tiered_open(ckpt_manager_t* durable, const char* local_url,
                                 int64_t local_every_steps,
                                 int64_t durable_every_steps, int local_keep,
                                 int replicas,
                                 double replication_bytes_per_second,
                                 const int* node_of_rank, size_t n_nodes,
                                 ckpt_tiered_t** out, char** errptr);
/* Waits for the save in flight, then frees the tiers. */
CKPT_EXPORT void ckpt_tiered_close(ckpt_tiered_t* tiers);
/* This rank's node index. */
CKPT_EXPORT int ckpt_tiered_node(const ckpt_tiered_t* tiers);

/* Which tiers a save goes to: by their intervals, or always (durable also
 * when its interval says not), or never to the durable tier. */
#define CKPT_TIER_BY_INTERVAL 0
#define CKPT_TIER_DURABLE 1
#define CKPT_TIER_SKIP_DURABLE 2

/* Saves `state` as `step` to the tiers that are due. result: {step, skipped,
 * local, local_error, durable, durable_result (ckpt_manager_save's result, or
 * null), local_bytes, replicated_bytes, local_seconds, durable_seconds}. A
 * failure of the local tier is local_error, not an error of the call: the
 * local tier is a cache. `options` (NULL: defaults) as for ckpt_manager_save;
 * stage_in_background is not used. */
CKPT_EXPORT int ckpt_tiered_save(ckpt_tiered_t* tiers, int64_t step,
                                 const ckpt_state_t* state,
                                 const ckpt_save_options_t* options,
                                 int durable, char** result, char** errptr);
/* The same in the background: returns once the state is copied (its arrays
 * are then the caller's again); NULL if it cannot start. */
CKPT_EXPORT ckpt_tier_save_t* ckpt_tiered_save_async(
    ckpt_tiered_t* tiers, int64_t step, const ckpt_state_t* state,
    const ckpt_save_options_t* options, int durable);
CKPT_EXPORT int ckpt_tier_save_done(const ckpt_tier_save_t* save);
/* Blocks until the save is done: its result, as ckpt_tiered_save's. */
CKPT_EXPORT int ckpt_tier_save_wait(ckpt_tier_save_t* save, char** result,
                                    char** errptr);
CKPT_EXPORT void ckpt_tier_save_destroy(ckpt_tier_save_t* save);

/* Fills `state` (as ckpt_manager_load does) from the newest step that the
 * local tiers (with peers' replicas) or the durable tier holds whole;
 * every rank calls it. result: {tier ("none": nothing saved yet, "local",
 * "durable"), step, info (null for "none"), fetched_bytes, ranks_fetched,
 * local_skipped, durable_has_step}. */
CKPT_EXPORT int ckpt_tiered_restore(ckpt_tiered_t* tiers, ckpt_state_t* state,
                                    int strict, char** result, char** errptr);
/* ckpt_tiered_restore with transactional as ckpt_manager_load_ex's. */
CKPT_EXPORT int ckpt_tiered_restore_ex(ckpt_tiered_t* tiers,
                                       ckpt_state_t* state, int strict,
                                       int transactional, char** result,
                                       char** errptr);

/* What a node's local root holds: [{rank, step, marked, world_size, bytes}]
 * (ckpt ls of a local tier). */
CKPT_EXPORT int ckpt_local_tier_list(const char* url, char** json,
                                     char** errptr);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CKPT_C_H_ */
