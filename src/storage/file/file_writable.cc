// A durable write to a file:// root. Writing KEY = DIR/NAME goes:
//
//   1. Open DIR under the root one component at a time (file_root.h: openat
//      with O_DIRECTORY|O_NOFOLLOW, so no symlink inside the root is
//      followed), creating each missing directory and fsyncing its parent.
//   2. Create DIR/NAME.ckpt-tmp-<16 random hex digits> with O_CREAT|O_EXCL,
//      write the bytes, fsync it, close it. A streamed write (a data object)
//      uses O_DIRECT where the file system takes it (direct_writer.h) and
//      is not held in memory (Root::direct_io: not on tmpfs or ramfs),
//      unless $CKPT_FILE_DIRECT_IO is "0"; the last block is padded and the
//      file cut back to size before the fsync. On tmpfs, if asked
//      (Root::huge_pages), the file gets 2 MiB pages (huge_pages.h).
//   3. Publish: renameat(tmp, NAME) to overwrite, or linkat(tmp, NAME) then
//      unlink(tmp) for create-if-absent (link fails with EEXIST when NAME
//      exists, so of racing writers exactly one wins).
//   4. fsync DIR, so the new name survives a crash.
//
// A failure before step 3 removes the temp file and publishes nothing. An
// fsync error is returned, never retried: after a failed fsync the kernel may
// have dropped the dirty pages, and a second fsync would report success.
// A writer that finds its freshly opened directory removed by a concurrent
// Delete walks again from the root.
#include "storage/file/file_writable.h"

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
#include "storage/file/file_storage.h"
#include "storage/file/huge_pages.h"
#include "util/log.h"
#include "util/names.h"

namespace ckpt::file {
namespace {

// Appends smaller than this are gathered in a buffer so that 10,000 tiny
// tensors do not cost 10,000 write(2) calls; larger ones go straight through.
constexpr size_t kSmallAppend = 256 << 10;
constexpr size_t kAppendBufferSize = 1 << 20;

// A temp file is named NAME + kTempMarker + kTempDigits lower-case hex
// digits; NAME is cut to kMaxTempStem bytes so that the whole fits in
// NAME_MAX (255).
constexpr size_t kTempDigits = 16;
constexpr size_t kMaxTempStem = 255 - kTempMarker.size() - kTempDigits;

bool IsLowerHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

// Sets `out` to kTempDigits random hex digits; returns 0 or an errno.
int RandomHex(std::string* out) {
  uint64_t bits = 0;
  ssize_t n;
  do {
    n = ::getrandom(&bits, sizeof(bits), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  if (n != static_cast<ssize_t>(sizeof(bits))) return EIO;
  static const char* kHex = "0123456789abcdef";
  static_assert(kTempDigits * 4 == sizeof(bits) * 8);
  out->assign(kTempDigits, '0');
  for (int i = static_cast<int>(kTempDigits) - 1; i >= 0; --i, bits >>= 4) {
    (*out)[i] = kHex[bits & 15];
  }
  return 0;
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
    w->want_direct_ = direct && w->root_->direct_io;
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

  // The new first bytes are kept and written over the old ones when the
  // object is published, after every other write has landed.
  bool KeepPrefix(uint64_t) override { return true; }
  Status RewritePrefix(std::span<const std::byte> bytes) override {
    CKPT_RETURN_IF_ERROR(CheckWritable());
    if (bytes.size() > size_) {
      return InvalidArgumentError(
          Where() + ": a rewrite of " + std::to_string(bytes.size()) +
          " bytes, past the " + std::to_string(size_) + " written");
    }
    prefix_.assign(bytes.begin(), bytes.end());
    return Status();
  }

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
    if (huge_ != nullptr) {
      if (int err = huge_->Finish(written_)) {
        return Fail(err, "cut temp file to size");
      }
    }
    if (int err = WritePrefix()) return Fail(err, "rewrite temp file's start");
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

  // RewritePrefix's bytes over the file's start, once every write has
  // landed; through a descriptor of its own without O_DIRECT, which would
  // want them aligned (the fsync after covers the file whatever wrote it).
  int WritePrefix() {
    if (prefix_.empty()) return 0;
    int fd = fd_.get();
    ScopedFd plain;
    if (direct_) {
      const int opened = ::openat(dir(), temp_name_.c_str(),
                                  O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
      if (opened < 0) return errno;
      plain = ScopedFd(opened);
      fd = opened;
    }
    if (int err = WriteAt(fd, prefix_.data(), prefix_.size(), 0)) return err;
    return plain.Close();
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
      // Huge pages are asked for through a mapping, which reads the file.
      const int flags = (root_->huge_pages ? O_RDWR : O_WRONLY) | O_CREAT |
                        O_EXCL | O_NOFOLLOW | O_CLOEXEC;
      const int fd = ::openat(dir(), temp_name_.c_str(),
                              flags | (want_direct_ ? O_DIRECT : 0), 0666);
      if (fd >= 0) {
        fd_ = ScopedFd(fd);
        if (want_direct_) direct_ = std::make_unique<DirectWriter>(fd);
        if (root_->huge_pages && !want_direct_) {
          huge_ = std::make_unique<HugePageWriter>(fd);
        }
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
    if (huge_ != nullptr) huge_->Before(written_, data.size());
    if (int err = WriteFully(fd_.get(), data)) {
      return Fail(err, "write temp file");
    }
    written_ += data.size();
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
  std::unique_ptr<HugePageWriter> huge_;  // set when asking for huge pages
  std::vector<std::byte> prefix_;         // RewritePrefix's, written at Close
  uint64_t size_ = 0;
  uint64_t written_ = 0;  // bytes written to the file (size_ less buffer_)
  Status error_;
  bool closed_ = false;
  bool published_ = false;
};

}  // namespace

Result<std::unique_ptr<WritableObject>> NewFileWritable(
    std::shared_ptr<const Root> root, std::string_view key) {
  CKPT_ASSIGN_OR_RETURN(
      auto w, FileWritable::Create(std::move(root), "write", key, true));
  return std::unique_ptr<WritableObject>(std::move(w));
}

Status PutFile(std::shared_ptr<const Root> root, std::string_view key,
               std::span<const std::byte> data, PutMode mode) {
  CKPT_ASSIGN_OR_RETURN(auto w,
                        FileWritable::Create(std::move(root), "put", key));
  CKPT_RETURN_IF_ERROR(w->WriteUnbuffered(data));
  return w->Publish(mode);
}

std::optional<std::string> TemporaryTarget(std::string_view key) {
  const std::string_view name = SplitKey(key).second;
  constexpr size_t kSuffix = kTempMarker.size() + kTempDigits;
  if (name.size() <= kSuffix || name.size() - kSuffix > kMaxTempStem) {
    return std::nullopt;
  }
  const std::string_view suffix = name.substr(name.size() - kSuffix);
  if (!suffix.starts_with(kTempMarker) ||
      !std::all_of(suffix.begin() + kTempMarker.size(), suffix.end(),
                   IsLowerHex)) {
    return std::nullopt;
  }
  std::string target(key.substr(0, key.size() - kSuffix));
  if (!ValidateKey(target).ok()) return std::nullopt;
  return target;
}

}  // namespace ckpt::file
