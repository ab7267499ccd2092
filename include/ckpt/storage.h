// The one narrow interface that carries every byte ckpt stores.
//
// A Storage is rooted at a URL (`file:///data/run42`, `mem://test`,
// `s3://bucket/run42`); keys are '/'-separated names relative to that root,
// validated so that none escapes it. Backends declare what they can do
// (StorageCapabilities) and the commit protocol branches on the declaration,
// never on the scheme.
//
// Thread safety: every method of a Storage may be called from many threads at
// once. A WritableObject is used by one thread at a time.
//
// Durability: Put and WritableObject::Close return only once the object is
// durable (on `file://`: data fsynced, renamed into place, directory fsynced).
// An error from either means the object may or may not exist afterwards, but
// never with partial contents under its key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/status.h"

namespace ckpt {

struct StorageCapabilities {
  // Put(kCreateIfAbsent) is atomic: of two racing writers exactly one wins
  // and the other gets AlreadyExists. Without it, the commit protocol checks
  // for the object first and accepts the (documented) race.
  bool atomic_create_if_absent = false;
  // ReadRange costs only the bytes asked for.
  bool range_reads = false;
  // The backend can copy an object without the bytes passing through us.
  bool server_side_copy = false;
  // The backend can link one object under a second key.
  bool hard_links = false;
  // ViewObject hands over an object's bytes in place (no transfer, no
  // copy), so reading them twice costs little more than once.
  bool object_views = false;
  // Reads are served by this machine: from its memory, or from a disk of
  // its own through its page cache (mem://; file:// on a local file system:
  // ext4, xfs, btrfs, tmpfs, ...), so every process on the machine reads
  // the same bytes at memory speed and no link to another machine limits
  // it. false: reads cross a link the processes of a node share (s3://;
  // file:// on a network or cluster file system, or one ckpt does not
  // know; a storage whose reads are paced, NewRateLimitedStorage). A load
  // on many ranks reads each byte once only where reads are not local
  // (LoadOptions::read_once).
  bool local_reads = false;
  // Large reads bypass the page cache (file:// on a disk file system, with
  // O_DIRECT): a cold object reads at the disk's speed, and one that lies
  // in the page cache is read from the disk again. An all-or-nothing load
  // with staging memory reads such objects into it when they are cold and
  // checks them in their views when they are in the page cache.
  bool direct_reads = false;
};

struct ObjectInfo {
  std::string key;            // relative to the root
  uint64_t size = 0;          // bytes
  int64_t mtime_unix_ms = 0;  // last modification, milliseconds since 1970
};

enum class PutMode {
  kOverwrite,       // replace any existing object atomically
  kCreateIfAbsent,  // fail with AlreadyExists if the key exists
};

// The bytes of one object, held in place by the backend (file://: the
// object's pages, mapped read-only; mem://: the backend's own buffer), as
// they were when the view was made: deleting or replacing the key leaves a
// view's bytes as they are. (Truncating a file:// object in place, which
// ckpt never does to a committed one, would end the process with SIGBUS on
// the next access past the new end.) Thread-safe: many threads may read
// one view at once.
class ObjectView {
 public:
  virtual ~ObjectView() = default;
  virtual std::span<const std::byte> bytes() const = 0;
  // Hints around reading [offset, offset + length) of bytes(). Prefetch:
  // the range will be read soon (file://: its pages are read from the disk
  // in the background, in large requests). WillRead, DoneReading: it is
  // read now, and is done with (file:// maps the range's pages in at once,
  // and afterwards lets them go from this process's resident memory; they
  // stay in the page cache), so a reader of a large object holds only what
  // it is reading.
  virtual void Prefetch(uint64_t offset, uint64_t length) const {}
  virtual void WillRead(uint64_t offset, uint64_t length) const {}
  virtual void DoneReading(uint64_t offset, uint64_t length) const {}
};

// An object written as a stream of parts. Nothing is visible under the key
// until Close succeeds; destroying it without Close discards what was written.
class WritableObject {
 public:
  virtual ~WritableObject() = default;
  WritableObject(const WritableObject&) = delete;
  WritableObject& operator=(const WritableObject&) = delete;

  virtual Status Append(std::span<const std::byte> data) = 0;
  // As Append, but the caller keeps `data` alive and unchanged until Close
  // returns or this object is destroyed, so a backend may write straight
  // from it instead of copying (file://: O_DIRECT from the caller's memory
  // where it is aligned).
  virtual Status AppendRetained(std::span<const std::byte> data) {
    return Append(data);
  }
  // Makes the object durable and publishes it under its key (replacing any
  // object there). After an error the object may or may not be published
  // (a failed directory fsync comes after the rename), but never partially.
  virtual Status Close() = 0;
  // Bytes appended so far.
  virtual uint64_t size() const = 0;
  // Asks, before the first Append, that the object's first `bytes` bytes
  // stay rewritable by RewritePrefix until Close; false where this object
  // cannot (the default). A writer that learns its object's first bytes
  // last (a data object with compressed chunks, whose header gives their
  // sizes) appends a placeholder, streams the rest, and rewrites the
  // placeholder before Close; where this is false it must hold the rest
  // until it knows the first bytes. file:// and mem:// keep any prefix;
  // s3:// one of at most a part, whose upload waits in memory until Close.
  virtual bool KeepPrefix(uint64_t bytes) { return false; }
  // Replaces the first `bytes.size()` bytes appended so far (at most
  // size(), and at most what KeepPrefix kept) with `bytes`; before Close.
  virtual Status RewritePrefix(std::span<const std::byte> bytes) {
    return FailedPreconditionError(
        "this storage cannot rewrite an object's first bytes");
  }

 protected:
  WritableObject() = default;
};

class Storage {
 public:
  virtual ~Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // The URL this storage is rooted at, as given to OpenStorage.
  virtual const std::string& url() const = 0;
  virtual StorageCapabilities capabilities() const = 0;

  // Starts a streamed write of `key`.
  virtual Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) = 0;
  // Writes a whole object durably.
  virtual Status Put(std::string_view key, std::span<const std::byte> data,
                     PutMode mode = PutMode::kOverwrite) = 0;
  // Reads exactly out.size() bytes starting at `offset`. NotFound if the
  // object is missing; DataLoss if the range runs past its end.
  virtual Status ReadRange(std::string_view key, uint64_t offset,
                           std::span<std::byte> out) = 0;
  // ReadRange that calls `filled` with each stretch of `out` as soon as it
  // holds its bytes, front to back; on success the stretches cover `out`.
  // A reader checks each stretch while it is still in the CPU's cache
  // instead of reading all of `out` from memory again. The default reads
  // the whole range, then calls `filled` once.
  using FilledFn = std::function<void(std::span<const std::byte>)>;
  virtual Status ReadRangeFilling(std::string_view key, uint64_t offset,
                                  std::span<std::byte> out,
                                  const FilledFn& filled);
  // Reads a whole object.
  virtual Result<std::string> ReadAll(std::string_view key);
  // A view of the whole object in place, for a reader that reads the same
  // bytes twice (an all-or-nothing load checks every chunk, then copies
  // it); NotFound if the object is missing. Null (the default) where the
  // backend cannot hand over its bytes without a transfer (s3://), and in
  // a StorageWrapper, whose reads go through its ReadRange.
  virtual Result<std::shared_ptr<const ObjectView>> ViewObject(
      std::string_view key);

  virtual Result<ObjectInfo> Stat(std::string_view key) = 0;
  // Every object whose key starts with `prefix`, at any depth, sorted by key.
  virtual Result<std::vector<ObjectInfo>> List(std::string_view prefix) = 0;
  // Removes an object; NotFound if there was none.
  virtual Status Delete(std::string_view key) = 0;

  // Writes that were started and never finished may leave state behind that
  // List does not show (on s3://: incomplete multipart uploads, which the
  // store keeps, and bills, until they are aborted). Offers each such write
  // under `prefix` to `dead` as an ObjectInfo (its key; size 0; when it
  // started) and abandons those for which `dead` returns true; returns their
  // keys. A backend that leaves no such state has nothing to do (the
  // default).
  virtual Result<std::vector<std::string>> AbortIncompleteWrites(
      std::string_view prefix,
      const std::function<bool(const ObjectInfo&)>& dead) {
    return std::vector<std::string>();
  }

  // If `key` names a temporary object this backend may leave behind after a
  // crash (file://: "<name>.ckpt-tmp-<16 hex digits>", the file a write
  // went through before it was renamed into place), the key it was being
  // written for; otherwise nullopt. Lets the layer above tell a dead
  // write's remains from the user's objects without knowing the backend.
  // A backend whose unfinished writes leave nothing in its listings (the
  // default; mem://, and s3://, whose incomplete uploads are
  // AbortIncompleteWrites' business) has none.
  virtual std::optional<std::string> TemporaryOf(std::string_view key) const {
    return std::nullopt;
  }

  // Whether the root is there. A file:// root opened with
  // StorageOptions::create_on_first_write that no write has made yet (and
  // nobody else since) is NotFound "root /path does not exist"; every other
  // root is there (the default).
  virtual Status CheckRoot() { return Status(); }

  // Convenience: Put of a string.
  Status PutString(std::string_view key, std::string_view data,
                   PutMode mode = PutMode::kOverwrite) {
    return Put(
        key,
        std::span<const std::byte>(
            reinterpret_cast<const std::byte*>(data.data()), data.size()),
        mode);
  }

 protected:
  Storage() = default;
};

// Forwards every call to a target, so a test (or a feature) overrides just the
// calls it cares about. Does not own the target unless given ownership.
// ReadRangeFilling and ViewObject are the calls not forwarded: the first
// goes through the wrapper's ReadRange, so a wrapper that overrides
// ReadRange (to count, throttle or fail reads) sees every read, and the
// second hands out no views.
class StorageWrapper : public Storage {
 public:
  explicit StorageWrapper(Storage* target) : target_(target) {}
  explicit StorageWrapper(std::unique_ptr<Storage> target)
      : owned_(std::move(target)), target_(owned_.get()) {}

  Storage* target() const { return target_; }

  const std::string& url() const override { return target_->url(); }
  StorageCapabilities capabilities() const override {
    StorageCapabilities caps = target_->capabilities();
    caps.object_views = false;  // ViewObject is not forwarded
    return caps;
  }
  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override {
    return target_->NewWritable(key);
  }
  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override {
    return target_->Put(key, data, mode);
  }
  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    return target_->ReadRange(key, offset, out);
  }
  Result<std::string> ReadAll(std::string_view key) override {
    return target_->ReadAll(key);
  }
  Result<ObjectInfo> Stat(std::string_view key) override {
    return target_->Stat(key);
  }
  Result<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    return target_->List(prefix);
  }
  Status Delete(std::string_view key) override { return target_->Delete(key); }
  Result<std::vector<std::string>> AbortIncompleteWrites(
      std::string_view prefix,
      const std::function<bool(const ObjectInfo&)>& dead) override {
    return target_->AbortIncompleteWrites(prefix, dead);
  }
  std::optional<std::string> TemporaryOf(std::string_view key) const override {
    return target_->TemporaryOf(key);
  }
  Status CheckRoot() override { return target_->CheckRoot(); }

 private:
  std::unique_ptr<Storage> owned_;
  Storage* target_;
};

// Paces the bytes written through `target` (Append, AppendRetained, Put) to
// at most `bytes_per_second` on average, so that a save running in the
// background (a tier's persistence, docs/tiers.md) leaves the disk or the
// network to the job. A write waits before it starts until the budget has
// room for it; a root idle for a while saves no credit. Reads, listings and
// deletes pass at once. Thread-safe: every write through the wrapper
// shares one budget. A rate of 0 or less returns `target` itself.
std::unique_ptr<Storage> NewRateLimitedStorage(std::unique_ptr<Storage> target,
                                               double bytes_per_second);

// How the second form of NewRateLimitedStorage paces.
struct RateLimit {
  // Bytes a second, reads and writes together; 0 or less: no limit.
  double bytes_per_second = 0;
  // Pace reads too (ReadRange, and so ReadRangeFilling; ReadAll), as a
  // link of that rate delivers them: a read of n bytes returns no sooner
  // than n / rate after the budget had room for it. The storage then
  // declares its reads not local (StorageCapabilities::local_reads).
  bool reads = false;
  // Empty: the budget is the wrapper's own. A path: every wrapper, in any
  // process of this machine, that names the same file shares one budget,
  // kept in that file (made if missing, 8 bytes; on a tmpfs such as
  // /dev/shm it costs no disk): the processes of one node sharing that
  // node's link to a network store.
  std::string shared_file;
};

// `target` paced as `limit` says; the same as the first form with
// `limit.reads` false and no shared file. Fails only where the shared file
// cannot be opened or mapped.
Result<std::unique_ptr<Storage>> NewRateLimitedStorage(
    std::unique_ptr<Storage> target, const RateLimit& limit);

// How an `s3://bucket/prefix` root reaches its store (docs/s3.md). A field
// left empty takes its value from the environment, then a default; options
// always win over the environment.
struct S3Options {
  // --- Where, and as whom.
  // "https://s3.eu-west-1.amazonaws.com", "http://127.0.0.1:9000". Empty:
  // $AWS_ENDPOINT_URL_S3, then $AWS_ENDPOINT_URL, then AWS's endpoint for
  // the region.
  std::string endpoint;
  // Empty: $AWS_REGION, then $AWS_DEFAULT_REGION, then "us-east-1".
  std::string region;
  // Empty: $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY, $AWS_SESSION_TOKEN.
  // Without an access key id requests are sent unsigned (anonymous).
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  enum class Addressing {
    kAuto,           // $CKPT_S3_ADDRESSING_STYLE ("path", "virtual"), else
                     // path style for an IP address or localhost endpoint or
                     // a bucket name with dots, virtual-hosted otherwise
    kVirtualHosted,  // https://bucket.endpoint/key
    kPath,           // https://endpoint/bucket/key
  };
  Addressing addressing = Addressing::kAuto;

  // --- What it does.
  // Create-if-absent sends `If-None-Match: *` and the backend declares
  // atomic_create_if_absent. Turn it off for stores that ignore the header
  // (s3rver, some S3-compatible servers): create-if-absent then checks with
  // HEAD first, which is not atomic, and the backend says so. Unset:
  // $CKPT_S3_CONDITIONAL_WRITES ("0" turns it off), else on.
  std::optional<bool> conditional_writes;
  // Tries per request: a 5xx, a 429 or a failed connection is retried with
  // exponential backoff (and jitter); any other 4xx never is. Left at 6,
  // $AWS_MAX_ATTEMPTS (1 to 100) sets it, as for AWS's own tools.
  int max_attempts = 6;
  int64_t initial_backoff_ms = 100;
  int64_t max_backoff_ms = 5000;
  // Limits of one HTTP exchange (a part of 16 MiB must fit in it).
  int64_t request_timeout_ms = 120'000;
  int64_t connect_timeout_ms = 10'000;

  // --- How fast, and with how much memory.
  // A Put of more bytes than this, and a streamed write that outgrows one
  // part, is uploaded in parts (multipart upload); but a conditional
  // create-if-absent Put is one PUT up to 5 GiB (docs/s3.md says why).
  uint64_t multipart_threshold = uint64_t{16} << 20;
  // Bytes per part (S3's minimum is 5 MiB). A streamed write holds at most
  // max_concurrency + 2 part buffers, reused (those in flight, the one
  // being filled, a spare), and the first part too where the object's
  // first bytes are rewritten at the end (KeepPrefix; docs/s3.md).
  uint64_t part_size = uint64_t{16} << 20;
  // Parts of one object uploaded at once; also the ranged GETs a large read
  // is split into.
  int max_concurrency = 4;
  // Sign each body's SHA-256, so the store rejects a corrupted upload. Off:
  // "UNSIGNED-PAYLOAD" (saves the hashing; use over https only).
  bool sign_payload = true;
};

// Options every backend understands; a backend ignores what does not apply.
struct StorageOptions {
  // Create the root (a directory, a memory namespace) if it does not exist.
  // Read-only tools pass false so that a typo is an error, not a new folder
  // (on s3://, which has no folders: the prefix must hold an object).
  bool create = true;
  // With create, a file:// directory that does not exist is made by the
  // first write (Put, NewWritable) instead of at open, so that opening a
  // mistyped path leaves nothing behind. Until then the root reads as
  // empty and CheckRoot() is NotFound. Other backends ignore it.
  bool create_on_first_write = false;
  // For s3:// roots.
  S3Options s3;
};

// A parsed root URL: "file:///data/run42" -> {"file", "", "/data/run42"}.
struct ParsedUrl {
  std::string url;     // as given
  std::string scheme;  // lower case
  std::string host;    // authority (bucket for s3, name for mem)
  std::string path;    // after the authority
};

// Parses `url`. A string without "://" is a local path and becomes a file URL
// (relative paths are made absolute). Errors are InvalidArgument and quote it.
Result<ParsedUrl> ParseUrl(std::string_view url);

using StorageFactory = std::function<Result<std::unique_ptr<Storage>>(
    const ParsedUrl& url, const StorageOptions& options)>;

// Maps URL schemes to backends. Thread-safe.
class StorageRegistry {
 public:
  StorageRegistry();
  ~StorageRegistry();
  StorageRegistry(const StorageRegistry&) = delete;
  StorageRegistry& operator=(const StorageRegistry&) = delete;

  // The process-wide registry, with the built-in backends registered.
  static StorageRegistry& Default();

  // Registers (or replaces) the backend for `scheme`.
  void Register(std::string scheme, StorageFactory factory);
  Result<std::unique_ptr<Storage>> Open(std::string_view url,
                                        const StorageOptions& options = {});
  std::vector<std::string> Schemes() const;

 private:
  // The factories and the mutex that guards them (storage.cc), so that this
  // header needs no mutex of its own.
  struct Backends;
  std::unique_ptr<Backends> backends_;
};

// Registers mem://, file:// and s3://.
void RegisterBuiltinBackends(StorageRegistry& registry);

// StorageRegistry::Default().Open(url, options).
Result<std::unique_ptr<Storage>> OpenStorage(
    std::string_view url, const StorageOptions& options = {});

}  // namespace ckpt
