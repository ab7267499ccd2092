// The file:// backend. A durable write of KEY = DIR/NAME goes:
//
//   1. Open DIR under the root one component at a time (openat with
//      O_DIRECTORY|O_NOFOLLOW, so no symlink inside the root is followed),
//      creating each missing directory and fsyncing its parent.
//   2. Create DIR/NAME.ckpt-tmp-<random hex> with O_CREAT|O_EXCL, write the
//      bytes, fsync it, close it. A streamed write (a data object) uses
//      O_DIRECT where the file system takes it (direct_writer.h), unless
//      $CKPT_FILE_DIRECT_IO is "0"; the last block is padded and the file
//      cut back to size before the fsync.
//   3. Publish: renameat(tmp, NAME) to overwrite, or linkat(tmp, NAME) then
//      unlink(tmp) for create-if-absent (link fails with EEXIST when NAME
//      exists, so of racing writers exactly one wins).
//   4. fsync DIR, so the new name survives a crash.
//
// Reads of 1 MiB and more use O_DIRECT too (same switch), through a pooled
// aligned block; smaller ones, and file systems without O_DIRECT, go
// through the page cache.
//
// A failure before step 3 removes the temp file and publishes nothing. An
// fsync error is returned, never retried: after a failed fsync the kernel may
// have dropped the dirty pages, and a second fsync would report success.
//
// Delete unlinks NAME, then removes directories left empty up to (not
// including) the root, and fsyncs the deepest directory that remains.
// A writer that finds its freshly opened directory removed by such a Delete
// walks again from the root.

#include "storage/file/file_storage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "storage/file/direct_writer.h"
#include "util/log.h"
#include "util/names.h"

namespace ckpt {
namespace {

// Appends smaller than this are gathered in a buffer so that 10,000 tiny
// tensors do not cost 10,000 write(2) calls; larger ones go straight through.
constexpr size_t kSmallAppend = 256 << 10;
constexpr size_t kAppendBufferSize = 1 << 20;

// Temp names must fit in NAME_MAX (255) with the marker and 16 hex digits.
constexpr size_t kMaxTempStem = 255 - kTempMarker.size() - 16;

// How often a writer walks again after a concurrent Delete removed the
// directory it was about to write into.
constexpr int kMaxWalkAttempts = 100;

class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~ScopedFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes the descriptor, returning close(2)'s errno (0 on success): on
  // some file systems (NFS) close is where a write error shows up.
  int Close() {
    if (fd_ < 0) return 0;
    const int rc = ::close(std::exchange(fd_, -1));
    return rc == 0 ? 0 : errno;
  }

 private:
  void Reset() {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  }
  int fd_ = -1;
};

// What every handle on one root shares. Writables keep it alive, so they
// stay usable after the Storage that made them is gone.
struct Root {
  std::string url;
  ScopedFd fd;

  // "put \"a/b\" in file:///data/run42" — the prefix of every message.
  std::string Where(std::string_view op, std::string_view key) const {
    return std::string(op) + " " + Quote(key) + " in " + url;
  }
};

int64_t MtimeMs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 +
         st.st_mtim.tv_nsec / 1000000;
}

// Splits "a/b/c" into {"a/b", "c"} and "c" into {"", "c"}.
std::pair<std::string_view, std::string_view> SplitKey(std::string_view key) {
  const size_t slash = key.rfind('/');
  if (slash == std::string_view::npos) return {"", key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}

std::vector<std::string> Components(std::string_view path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    out.emplace_back(path.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Sets `out` to 16 random hex digits; returns 0 or an errno.
int RandomHex(std::string* out) {
  uint64_t bits = 0;
  ssize_t n;
  do {
    n = ::getrandom(&bits, sizeof(bits), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  if (n != static_cast<ssize_t>(sizeof(bits))) return EIO;
  static const char* kHex = "0123456789abcdef";
  out->assign(16, '0');
  for (int i = 15; i >= 0; --i, bits >>= 4) (*out)[i] = kHex[bits & 15];
  return 0;
}

int FsyncFd(int fd) { return ::fsync(fd) == 0 ? 0 : errno; }

// Reads of at least this many bytes (the slabs of a load) bypass the page
// cache: a checkpoint is read once, so the cache only adds a copy, and on the
// reference machine cold O_DIRECT reads ran about 1.3 times buffered ones.
constexpr uint64_t kDirectReadMin = uint64_t{1} << 20;

// Whether streamed writes and large reads may use O_DIRECT
// ($CKPT_FILE_DIRECT_IO=0: never).
bool DirectIoAllowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("CKPT_FILE_DIRECT_IO");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return allowed;
}

// Writes all of `data` at the file offset, through EINTR and short writes.
int WriteFully(int fd, std::span<const std::byte> data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    data = data.subspan(static_cast<size_t>(n));
  }
  return 0;
}

Status SymlinkError(const Root& root, std::string_view op, std::string_view key,
                    std::string_view link) {
  return InvalidArgumentError(root.Where(op, key) + ": " + Quote(link) +
                              " is a symbolic link, and links inside the root "
                              "are never followed");
}

// The open directories on the way to an object: dirs[i] is the directory
// named by the first i+1 components of the key.
struct DirChain {
  std::vector<ScopedFd> dirs;
  // The directory that holds the object (the root for a top-level key).
  int parent(const Root& root) const {
    return dirs.empty() ? root.fd.get() : dirs.back().get();
  }
};

// How a walk treats a directory component that is missing.
enum class Missing {
  kNotFound,  // the object cannot exist: NotFound
  kCreate,    // mkdir it (and fsync its parent)
};

// Opens every component of `dir_path` (a key minus its last component) under
// the root, never following a symlink. `op` and `key` are for messages.
Result<DirChain> WalkDirs(const Root& root, std::string_view op,
                          std::string_view key, std::string_view dir_path,
                          Missing missing) {
  DirChain chain;
  size_t start = 0;
  while (start < dir_path.size()) {
    size_t end = dir_path.find('/', start);
    if (end == std::string_view::npos) end = dir_path.size();
    const std::string name(dir_path.substr(start, end - start));
    const std::string_view so_far = dir_path.substr(0, end);
    const int parent = chain.parent(root);
    const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    int fd = ::openat(parent, name.c_str(), flags);
    // Retrying the open after mkdirat (EEXIST included: another writer made
    // it) also covers a concurrent Delete removing the directory in between.
    for (int attempt = 1;
         fd < 0 && errno == ENOENT && missing == Missing::kCreate &&
         attempt < kMaxWalkAttempts;
         ++attempt) {
      if (::mkdirat(parent, name.c_str(), 0777) == 0) {
        if (int err = FsyncFd(parent)) {
          return ErrnoError(err, root.Where(op, key) +
                                     ": fsync the parent of new directory " +
                                     Quote(so_far));
        }
      } else if (errno != EEXIST) {
        return ErrnoError(
            errno, root.Where(op, key) + ": create directory " + Quote(so_far));
      }
      fd = ::openat(parent, name.c_str(), flags);
    }
    if (fd < 0) {
      const int err = errno;
      struct stat st;
      if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISLNK(st.st_mode)) {
        return SymlinkError(root, op, key, so_far);
      }
      if ((err == ENOENT || err == ENOTDIR) && missing == Missing::kNotFound) {
        return NotFoundError(root.Where(op, key) + ": no such object");
      }
      if (err == ENOTDIR) {
        return InvalidArgumentError(root.Where(op, key) + ": " + Quote(so_far) +
                                    " is an object, not a directory");
      }
      return ErrnoError(
          err, root.Where(op, key) + ": open directory " + Quote(so_far));
    }
    chain.dirs.emplace_back(fd);
    start = end + 1;
  }
  return chain;
}

// Checks what is at `name` in `dir` before an object is read, replaced or
// removed there: a symlink is refused, a directory or special file is not
// an object. ENOENT is returned to the caller as NotFound.
Result<struct stat> StatObject(const Root& root, std::string_view op,
                               std::string_view key, int dir,
                               const std::string& name) {
  struct stat st;
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) {
      return NotFoundError(root.Where(op, key) + ": no such object");
    }
    return ErrnoError(errno, root.Where(op, key) + ": stat");
  }
  if (S_ISLNK(st.st_mode)) return SymlinkError(root, op, key, key);
  if (!S_ISREG(st.st_mode)) {
    return NotFoundError(root.Where(op, key) +
                         ": no such object (a directory or special file is "
                         "in its place)");
  }
  return st;
}

class FileWritable : public WritableObject {
 public:
  // Creates the temp file for `key`; `op` ("put", "write") is for messages.
  // `direct`: try O_DIRECT (streamed data objects).
  static Result<std::unique_ptr<FileWritable>> Create(
      std::shared_ptr<const Root> root, std::string_view op,
      std::string_view key, bool direct = false) {
    CKPT_RETURN_IF_ERROR_CTX(ValidateKey(key), root->Where(op, key));
    auto [dir_path, name] = SplitKey(key);
    std::unique_ptr<FileWritable> w(
        new FileWritable(std::move(root), op, key, name));
    w->want_direct_ = direct && DirectIoAllowed();
    for (int attempt = 1;; ++attempt) {
      // NotFound and ENOENT here mean a concurrent Delete removed a
      // directory on the way (after we created or opened it): walk again.
      Result<DirChain> chain =
          WalkDirs(*w->root_, op, key, dir_path, Missing::kCreate);
      if (!chain.ok()) {
        if (chain.status().code() == ErrorCode::kNotFound &&
            attempt < kMaxWalkAttempts) {
          continue;
        }
        return chain.status();
      }
      w->chain_ = std::move(chain).value();
      CKPT_RETURN_IF_ERROR(w->CheckTarget());
      const int err = w->CreateTemp();
      if (err == 0) return w;
      Status status = ErrnoError(
          err, w->Where() + ": create temp file " + Quote(w->TempKey()));
      w->temp_name_.clear();  // never created, so nothing to remove
      if (err != ENOENT || attempt >= kMaxWalkAttempts) return status;
    }
  }

  ~FileWritable() override {
    if (!published_) Discard();
  }

  Status Append(std::span<const std::byte> data) override {
    return AppendImpl(data, /*retained=*/false);
  }

  Status AppendRetained(std::span<const std::byte> data) override {
    return AppendImpl(data, /*retained=*/true);
  }

  Status Close() override { return Publish(PutMode::kOverwrite); }

  uint64_t size() const override { return size_; }

  // Writes `data` without buffering (Put hands over the whole object).
  Status WriteUnbuffered(std::span<const std::byte> data) {
    CKPT_RETURN_IF_ERROR(CheckWritable());
    CKPT_RETURN_IF_ERROR(Flush());
    CKPT_RETURN_IF_ERROR(Write(data));
    size_ += data.size();
    return Status();
  }

  // Steps 2 (end) to 4 of the protocol at the top of this file.
  Status Publish(PutMode mode) {
    CKPT_RETURN_IF_ERROR(CheckWritable());
    closed_ = true;
    CKPT_RETURN_IF_ERROR(Flush());
    if (direct_) {
      if (int err = direct_->Finish()) return Fail(err, "write temp file");
    }
    if (int err = FsyncFd(fd_.get())) return Fail(err, "fsync temp file");
    if (int err = fd_.Close()) return Fail(err, "close temp file");
    if (mode == PutMode::kOverwrite) {
      if (::renameat(dir(), temp_name_.c_str(), dir(), name_.c_str()) != 0) {
        return Fail(errno, "rename temp file into place");
      }
    } else {
      if (::linkat(dir(), temp_name_.c_str(), dir(), name_.c_str(), 0) != 0) {
        if (errno == EEXIST) {
          Discard();
          return AlreadyExistsError(Where() + ": object already exists");
        }
        return Fail(errno, "link temp file into place");
      }
      if (::unlinkat(dir(), temp_name_.c_str(), 0) != 0) {
        // The object is published; the stray temp file is listed and
        // garbage collection removes it.
        const int err = errno;
        LogWarning(Where() + ": cannot remove temp file " + Quote(TempKey()) +
                   ": " + std::strerror(err));
      }
    }
    published_ = true;
    if (int err = FsyncFd(dir())) {
      return ErrnoError(err, Where() + ": fsync directory after publishing");
    }
    return Status();
  }

 private:
  FileWritable(std::shared_ptr<const Root> root, std::string_view op,
               std::string_view key, std::string_view name)
      : root_(std::move(root)), op_(op), key_(key), name_(name) {}

  // `retained`: the caller keeps `data` until Close, so the O_DIRECT writer
  // may write aligned stretches of it in place.
  Status AppendImpl(std::span<const std::byte> data, bool retained) {
    CKPT_RETURN_IF_ERROR(CheckWritable());
    if (direct_) {
      const int err =
          retained ? direct_->AppendRetained(data) : direct_->Append(data);
      if (err != 0) return Fail(err, "write temp file");
      size_ += data.size();
      return Status();
    }
    if (data.size() < kSmallAppend) {
      if (buffer_.size() + data.size() > kAppendBufferSize) {
        CKPT_RETURN_IF_ERROR(Flush());
      }
      if (buffer_.capacity() == 0) buffer_.reserve(kAppendBufferSize);
      buffer_.insert(buffer_.end(), data.begin(), data.end());
    } else {
      CKPT_RETURN_IF_ERROR(Flush());
      CKPT_RETURN_IF_ERROR(Write(data));
    }
    size_ += data.size();
    return Status();
  }

  int dir() const { return chain_.parent(*root_); }
  std::string Where() const { return root_->Where(op_, key_); }
  // The temp file's path relative to the root, for messages.
  std::string TempKey() const {
    return key_.substr(0, key_.size() - name_.size()) + temp_name_;
  }

  // Refuses early what the rename would silently replace (a symlink) or
  // fail on (a directory).
  Status CheckTarget() const {
    struct stat st;
    if (::fstatat(dir(), name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return Status();
    }
    if (S_ISLNK(st.st_mode)) return SymlinkError(*root_, op_, key_, key_);
    if (S_ISDIR(st.st_mode)) {
      return InvalidArgumentError(Where() +
                                  ": a directory is in the object's place");
    }
    return Status();
  }

  // Returns 0 or the errno of the failed create; a name collision (EEXIST)
  // is retried with a fresh name.
  int CreateTemp() {
    for (;;) {
      std::string hex;
      if (int err = RandomHex(&hex)) return err;
      temp_name_ =
          name_.substr(0, kMaxTempStem) + std::string(kTempMarker) + hex;
      const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
      const int fd = ::openat(dir(), temp_name_.c_str(),
                              flags | (want_direct_ ? O_DIRECT : 0), 0666);
      if (fd >= 0) {
        fd_ = ScopedFd(fd);
        if (want_direct_) direct_ = std::make_unique<DirectWriter>(fd);
        return 0;
      }
      if (errno == EINVAL && want_direct_) {
        // The file system refuses O_DIRECT: write through the page cache.
        ::unlinkat(dir(), temp_name_.c_str(), 0);
        want_direct_ = false;
        continue;
      }
      if (errno != EEXIST) return errno;
    }
  }

  Status CheckWritable() const {
    if (!error_.ok()) return error_;
    if (closed_) {
      return FailedPreconditionError(Where() + ": the object is closed");
    }
    return Status();
  }

  Status Write(std::span<const std::byte> data) {
    if (int err = WriteFully(fd_.get(), data)) {
      return Fail(err, "write temp file");
    }
    return Status();
  }

  Status Flush() {
    if (buffer_.empty()) return Status();
    CKPT_RETURN_IF_ERROR(Write(buffer_));
    buffer_.clear();
    return Status();
  }

  // Records the first error (later calls return it again), removes the temp
  // file, and returns the error.
  Status Fail(int err, std::string_view what) {
    error_ = ErrnoError(
        err, Where() + ": " + std::string(what) + " " + Quote(TempKey()));
    Discard();
    return error_;
  }

  void Discard() {
    direct_.reset();  // its writes in flight end before the file closes
    if (temp_name_.empty()) return;
    fd_.Close();
    ::unlinkat(dir(), temp_name_.c_str(), 0);
    temp_name_.clear();
  }

  const std::shared_ptr<const Root> root_;
  const std::string op_;
  const std::string key_;
  const std::string name_;  // the key's last component
  DirChain chain_;
  std::string temp_name_;  // empty once removed or published
  ScopedFd fd_;
  std::vector<std::byte> buffer_;
  bool want_direct_ = false;
  std::unique_ptr<DirectWriter> direct_;  // set when writing with O_DIRECT
  uint64_t size_ = 0;
  Status error_;
  bool closed_ = false;
  bool published_ = false;
};

class FileStorage : public Storage {
 public:
  explicit FileStorage(std::shared_ptr<const Root> root)
      : root_(std::move(root)) {}

  const std::string& url() const override { return root_->url; }

  StorageCapabilities capabilities() const override {
    StorageCapabilities caps;
    caps.atomic_create_if_absent = true;
    caps.range_reads = true;
    caps.hard_links = true;
    return caps;
  }

  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override {
    CKPT_ASSIGN_OR_RETURN(auto w,
                          FileWritable::Create(root_, "write", key, true));
    return std::unique_ptr<WritableObject>(std::move(w));
  }

  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override {
    CKPT_ASSIGN_OR_RETURN(auto w, FileWritable::Create(root_, "put", key));
    CKPT_RETURN_IF_ERROR(w->WriteUnbuffered(data));
    return w->Publish(mode);
  }

  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    CKPT_ASSIGN_OR_RETURN(ScopedFd fd, OpenObject("read", key));
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) {
      return ErrnoError(errno, root_->Where("read", key) + ": fstat");
    }
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (offset > size || out.size() > size - offset) {
      return DataLossError(root_->Where("read", key) + ": " +
                           std::to_string(out.size()) + " bytes at offset " +
                           std::to_string(offset) +
                           " run past the end of the object (" +
                           std::to_string(size) + " bytes)");
    }
    if (out.size() >= kDirectReadMin && DirectIoAllowed()) {
      CKPT_RETURN_IF_ERROR(ReadDirect(key, fd.get(), offset, out));
    }
    return ReadFully("read", key, fd.get(), offset, out);
  }

  // One open file, so a concurrent overwrite cannot change the size between
  // the stat and the read (the default ReadAll opens the object twice).
  Result<std::string> ReadAll(std::string_view key) override {
    CKPT_ASSIGN_OR_RETURN(ScopedFd fd, OpenObject("read", key));
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) {
      return ErrnoError(errno, root_->Where("read", key) + ": fstat");
    }
    std::string out(static_cast<size_t>(st.st_size), '\0');
    CKPT_RETURN_IF_ERROR(
        ReadFully("read", key, fd.get(), 0,
                  std::span<std::byte>(reinterpret_cast<std::byte*>(out.data()),
                                       out.size())));
    return out;
  }

  Result<ObjectInfo> Stat(std::string_view key) override {
    CKPT_RETURN_IF_ERROR_CTX(ValidateKey(key), root_->Where("stat", key));
    auto [dir_path, name] = SplitKey(key);
    CKPT_ASSIGN_OR_RETURN(
        DirChain chain,
        WalkDirs(*root_, "stat", key, dir_path, Missing::kNotFound));
    CKPT_ASSIGN_OR_RETURN(struct stat st,
                          StatObject(*root_, "stat", key, chain.parent(*root_),
                                     std::string(name)));
    return ObjectInfo{std::string(key), static_cast<uint64_t>(st.st_size),
                      MtimeMs(st)};
  }

  Result<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    std::vector<ObjectInfo> out;
    const size_t slash = prefix.rfind('/');
    const std::string_view dir_path =
        slash == std::string_view::npos ? "" : prefix.substr(0, slash);
    const std::string_view leaf =
        slash == std::string_view::npos ? prefix : prefix.substr(slash + 1);
    // Every key is valid, so the part of a matching key before the prefix's
    // last '/' is a valid key too; when it is not, nothing matches (and
    // nothing may be walked: it could hold "..").
    if (slash != std::string_view::npos && !ValidateKey(dir_path).ok()) {
      return out;
    }
    Result<DirChain> chain =
        WalkDirs(*root_, "list", prefix, dir_path, Missing::kNotFound);
    if (!chain.ok()) {
      // Missing directories, and symlinks (which are not followed), hold no
      // objects.
      const ErrorCode code = chain.status().code();
      if (code == ErrorCode::kNotFound || code == ErrorCode::kInvalidArgument) {
        return out;
      }
      return chain.status();
    }
    const std::string key_prefix =
        dir_path.empty() ? "" : std::string(dir_path) + "/";
    CKPT_RETURN_IF_ERROR(
        ListDir(prefix, chain->parent(*root_), key_prefix, leaf, &out));
    std::sort(
        out.begin(), out.end(),
        [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
    return out;
  }

  Status Delete(std::string_view key) override {
    CKPT_RETURN_IF_ERROR_CTX(ValidateKey(key), root_->Where("delete", key));
    auto [dir_path, name_view] = SplitKey(key);
    const std::string name(name_view);
    CKPT_ASSIGN_OR_RETURN(
        DirChain chain,
        WalkDirs(*root_, "delete", key, dir_path, Missing::kNotFound));
    const int parent = chain.parent(*root_);
    CKPT_RETURN_IF_ERROR(
        StatObject(*root_, "delete", key, parent, name).status());
    if (::unlinkat(parent, name.c_str(), 0) != 0) {
      if (errno == ENOENT) {
        return NotFoundError(root_->Where("delete", key) + ": no such object");
      }
      return ErrnoError(errno, root_->Where("delete", key) + ": unlink");
    }
    // Remove the directories this left empty, deepest first; rmdir fails
    // (ENOTEMPTY) at the first one still in use, which ends the pruning.
    // Only the deepest surviving directory needs an fsync: the removals
    // below it are entries in it.
    const std::vector<std::string> dirs = Components(dir_path);
    int deepest = parent;
    for (size_t i = dirs.size(); i > 0; --i) {
      const int up = i == 1 ? root_->fd.get() : chain.dirs[i - 2].get();
      if (::unlinkat(up, dirs[i - 1].c_str(), AT_REMOVEDIR) != 0) break;
      deepest = up;
    }
    if (int err = FsyncFd(deepest)) {
      return ErrnoError(err, root_->Where("delete", key) + ": fsync directory");
    }
    return Status();
  }

 private:
  // Opens an object for reading, refusing symlinks and non-files. O_NONBLOCK
  // keeps a FIFO planted in the root from blocking the open.
  Result<ScopedFd> OpenObject(std::string_view op, std::string_view key) {
    CKPT_RETURN_IF_ERROR_CTX(ValidateKey(key), root_->Where(op, key));
    auto [dir_path, name_view] = SplitKey(key);
    const std::string name(name_view);
    CKPT_ASSIGN_OR_RETURN(DirChain chain, WalkDirs(*root_, op, key, dir_path,
                                                   Missing::kNotFound));
    const int fd = ::openat(chain.parent(*root_), name.c_str(),
                            O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      if (errno == ELOOP) return SymlinkError(*root_, op, key, key);
      if (errno == ENOENT) {
        return NotFoundError(root_->Where(op, key) + ": no such object");
      }
      return ErrnoError(errno, root_->Where(op, key) + ": open");
    }
    ScopedFd owned(fd);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      return ErrnoError(errno, root_->Where(op, key) + ": fstat");
    }
    if (!S_ISREG(st.st_mode)) {
      return NotFoundError(root_->Where(op, key) +
                           ": no such object (a directory or special file is "
                           "in its place)");
    }
    return owned;
  }

  // Reads the front of `out` at `offset` with O_DIRECT, in aligned pieces
  // through a pooled block, advancing both past what it read. Where the file
  // system refuses O_DIRECT or no block can be had it reads nothing (or
  // stops), and the caller reads the rest through the page cache.
  Status ReadDirect(std::string_view key, int fd, uint64_t& offset,
                    std::span<std::byte>& out) {
    constexpr uint64_t kAlign = DirectWriter::kAlign;
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_DIRECT) != 0) {
      return Status();
    }
    std::byte* block = AcquireDirectBlock();
    Status status;
    while (block != nullptr && !out.empty()) {
      const uint64_t start = offset / kAlign * kAlign;
      const uint64_t skip = offset - start;
      const uint64_t want = std::min<uint64_t>(
          DirectWriter::kBlock,
          (skip + out.size() + kAlign - 1) / kAlign * kAlign);
      const ssize_t n = ::pread(fd, block, want, static_cast<off_t>(start));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL) break;  // no O_DIRECT here after all
      if (n < 0) {
        status = ErrnoError(errno, root_->Where("read", key) +
                                       ": pread (O_DIRECT) at offset " +
                                       std::to_string(start));
        break;
      }
      if (static_cast<uint64_t>(n) <= skip) break;  // the end: ReadFully says
      const size_t got =
          std::min<uint64_t>(static_cast<uint64_t>(n) - skip, out.size());
      std::memcpy(out.data(), block + skip, got);
      out = out.subspan(got);
      offset += got;
    }
    ReleaseDirectBlock(block);
    ::fcntl(fd, F_SETFL, flags);
    return status;
  }

  Status ReadFully(std::string_view op, std::string_view key, int fd,
                   uint64_t offset, std::span<std::byte> out) {
    while (!out.empty()) {
      const ssize_t n =
          ::pread(fd, out.data(), out.size(), static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoError(errno, root_->Where(op, key) + ": pread at offset " +
                                     std::to_string(offset));
      }
      if (n == 0) {
        return DataLossError(root_->Where(op, key) +
                             ": the object ends at offset " +
                             std::to_string(offset) + ", before the " +
                             std::to_string(out.size()) +
                             " more bytes asked for (truncated under us?)");
      }
      out = out.subspan(static_cast<size_t>(n));
      offset += static_cast<uint64_t>(n);
    }
    return Status();
  }

  // Appends the objects under `dir` (whose keys start with `key_prefix`) to
  // `out`, recursively; at this level only names starting with `name_prefix`.
  // Symlinks and special files are skipped; entries that vanish while we
  // look are skipped too.
  Status ListDir(std::string_view prefix, int dir,
                 const std::string& key_prefix, std::string_view name_prefix,
                 std::vector<ObjectInfo>* out) {
    auto fail = [&](int err, std::string_view what) {
      return ErrnoError(err, root_->Where("list", prefix) + ": " +
                                 std::string(what) + " " +
                                 Quote(key_prefix.empty() ? "." : key_prefix));
    };
    // A fresh open file description: a dup would share the read position
    // with other threads listing the same directory.
    const int fd =
        ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return fail(errno, "open directory");
    DIR* stream = ::fdopendir(fd);
    if (stream == nullptr) {
      const int err = errno;
      ::close(fd);
      return fail(err, "read directory");
    }
    std::unique_ptr<DIR, int (*)(DIR*)> closer(stream, ::closedir);
    for (;;) {
      errno = 0;
      const dirent* entry = ::readdir(stream);
      if (entry == nullptr) {
        if (errno != 0) return fail(errno, "read directory");
        break;
      }
      const std::string_view name = entry->d_name;
      if (name == "." || name == ".." || !name.starts_with(name_prefix)) {
        continue;
      }
      // A name no key can have (a backslash, a control byte) is not ours.
      if (!ValidateKey(name).ok()) continue;
      struct stat st;
      if (::fstatat(fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;
        return fail(errno, "stat an entry of");
      }
      std::string key = key_prefix + std::string(name);
      if (S_ISREG(st.st_mode)) {
        out->push_back(ObjectInfo{
            std::move(key), static_cast<uint64_t>(st.st_size), MtimeMs(st)});
      } else if (S_ISDIR(st.st_mode)) {
        const int child = ::openat(
            fd, entry->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (child < 0) {
          // Removed, or swapped for a symlink, since the fstatat.
          if (errno == ENOENT || errno == ENOTDIR) continue;
          return fail(errno, "open a directory in");
        }
        ScopedFd owned(child);
        CKPT_RETURN_IF_ERROR(ListDir(prefix, child, key + "/", "", out));
      }
    }
    return Status();
  }

  const std::shared_ptr<const Root> root_;
};

// mkdir -p, fsyncing the parent of every directory it creates.
Status MakeDirs(const std::string& url, const std::string& path) {
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    const std::string dir = path.substr(0, pos);
    if (::mkdir(dir.c_str(), 0777) != 0) {
      if (errno == EEXIST) continue;
      return ErrnoError(errno,
                        "open " + url + ": create directory " + Quote(dir));
    }
    const std::string parent =
        dir.substr(0, std::max<size_t>(dir.rfind('/'), 1));
    ScopedFd parent_fd(
        ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!parent_fd.valid()) {
      return ErrnoError(errno,
                        "open " + url + ": open directory " + Quote(parent));
    }
    if (int err = FsyncFd(parent_fd.get())) {
      return ErrnoError(err,
                        "open " + url + ": fsync directory " + Quote(parent));
    }
  }
  return Status();
}

}  // namespace

Result<std::unique_ptr<Storage>> OpenFileStorage(
    const ParsedUrl& url, const StorageOptions& options) {
  if (!url.host.empty() && url.host != "localhost") {
    return InvalidArgumentError(
        "URL " + Quote(url.url) + ": a file URL names a local path " +
        "(file:///path); host " + Quote(url.host) + " is not supported");
  }
  std::string path = url.path;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path.empty() || path.front() != '/') {
    return InvalidArgumentError("URL " + Quote(url.url) +
                                ": a file URL needs an absolute path");
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return ErrnoError(errno, "open " + url.url + ": stat " + Quote(path));
    }
    if (!options.create) {
      return NotFoundError("open " + url.url + ": directory " + Quote(path) +
                           " does not exist");
    }
    CKPT_RETURN_IF_ERROR(MakeDirs(url.url, path));
  } else if (!S_ISDIR(st.st_mode)) {
    return InvalidArgumentError("open " + url.url + ": " + Quote(path) +
                                " exists and is not a directory");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return ErrnoError(errno,
                      "open " + url.url + ": open directory " + Quote(path));
  }
  auto root = std::make_shared<Root>();
  root->url = url.url;
  root->fd = ScopedFd(fd);
  return std::unique_ptr<Storage>(new FileStorage(std::move(root)));
}

}  // namespace ckpt
