// The file:// backend's facade: each Storage call, on the mechanisms it is
// built from, one a file:
//
//   file_root.cc      the root's directory handle, and the O_NOFOLLOW walk
//                     from it to the directory of a key
//   file_writable.cc  Put and NewWritable: temp file, fsync, rename or link
//                     into place, directory fsync (the protocol, numbered)
//   direct_writer.cc  the O_DIRECT streaming behind NewWritable
//   file_read.cc      ReadRange and ReadAll
//   file_list.cc      List
//
// Stat and Delete are here, and the root made by its first write
// (create_on_first_write): until a write creates its directory, a root
// reads as empty. Delete unlinks NAME, then removes directories
// left empty up to (not including) the root, and fsyncs the deepest
// directory that remains.
#include "storage/file/file_storage.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "storage/file/file_list.h"
#include "storage/file/file_read.h"
#include "storage/file/file_root.h"
#include "storage/file/file_writable.h"
#include "util/mutex.h"
#include "util/names.h"

namespace ckpt {
namespace file {
namespace {

// Whether `path` (or, where it does not exist yet, its nearest existing
// parent) lies on a file system whose reads this machine serves: a disk of
// its own or memory (StorageCapabilities::local_reads). By statfs's magic
// number; a network or cluster file system (NFS, SMB, Lustre, GPFS,
// CephFS, BeeGFS, FUSE, 9p, ...) and any file system not listed here is
// taken as reached over a link, as read-once assumed before it asked.
bool OnLocalFileSystem(std::string path) {
  struct statfs fs {};
  while (::statfs(path.c_str(), &fs) != 0) {
    const size_t slash = path.find_last_of('/');
    if (errno != ENOENT || slash == std::string::npos || path == "/") {
      return false;
    }
    path = slash == 0 ? "/" : path.substr(0, slash);
  }
  switch (static_cast<uint64_t>(fs.f_type)) {
    case 0xEF53:      // ext2, ext3, ext4
    case 0x58465342:  // xfs
    case 0x9123683E:  // btrfs
    case 0x2FC12FC1:  // zfs
    case 0xF2F52010:  // f2fs
    case 0xCA451A4E:  // bcachefs
    case 0x3153464A:  // jfs
    case 0x52654973:  // reiserfs
    case 0x01021994:  // tmpfs
    case 0x858458F6:  // ramfs
    case 0x794C7630:  // overlayfs (a container's root)
      return true;
    default:
      return false;
  }
}

class FileStorage : public Storage {
 public:
  // `root` is null for a root to be made by its first write
  // (StorageOptions::create_on_first_write) that does not exist yet.
  FileStorage(std::string url, std::string path,
              std::shared_ptr<const Root> root)
      : url_(std::move(url)),
        path_(std::move(path)),
        local_reads_(OnLocalFileSystem(path_)),
        root_(std::move(root)) {
    opened_.store(root_ != nullptr, std::memory_order_release);
  }

  const std::string& url() const override { return url_; }

  StorageCapabilities capabilities() const override {
    StorageCapabilities caps;
    caps.atomic_create_if_absent = true;
    caps.range_reads = true;
    caps.hard_links = true;
    caps.object_views = true;
    caps.local_reads = local_reads_;
    caps.direct_reads =
        opened_.load(std::memory_order_acquire) && root_->direct_io;
    return caps;
  }

  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override {
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Root> root, GetRoot(true));
    return NewFileWritable(std::move(root), key);
  }

  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override {
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Root> root, GetRoot(true));
    return PutFile(std::move(root), key, data, mode);
  }

  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Root> root, GetRoot(false));
    if (root == nullptr) return Absent("read", key);
    return ReadObjectRange(*root, key, offset, out);
  }

  Status ReadRangeFilling(std::string_view key, uint64_t offset,
                          std::span<std::byte> out,
                          const FilledFn& filled) override {
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Root> root, GetRoot(false));
    if (root == nullptr) return Absent("read", key);
    return ReadObjectRange(*root, key, offset, out, &filled);
  }

  Result<std::string> ReadAll(std::string_view key) override {
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Root> root, GetRoot(false));
    if (root == nullptr) return Absent("read", key);
    return ReadObject(*root, key);
  }

  Result<std::shared_ptr<const ObjectView>> ViewObject(
      std::string_view key) override {
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Root> root, GetRoot(false));
    if (root == nullptr) return Absent("view", key);
    return file::ViewObject(*root, key);
  }

  Result<ObjectInfo> Stat(std::string_view key) override {
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Root> root_ptr, GetRoot(false));
    if (root_ptr == nullptr) return Absent("stat", key);
    const Root& root = *root_ptr;
    CKPT_RETURN_IF_ERROR_CTX(ValidateKey(key), root.Where("stat", key));
    auto [dir_path, name] = SplitKey(key);
    CKPT_ASSIGN_OR_RETURN(DirChain chain, WalkDirs(root, "stat", key, dir_path,
                                                   Missing::kNotFound));
    CKPT_ASSIGN_OR_RETURN(
        struct stat st,
        StatObject(root, "stat", key, chain.parent(root), std::string(name)));
    return ObjectInfo{std::string(key), static_cast<uint64_t>(st.st_size),
                      MtimeMs(st)};
  }

  Result<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Root> root, GetRoot(false));
    if (root == nullptr) return std::vector<ObjectInfo>();
    return ListObjects(*root, prefix);
  }

  Status Delete(std::string_view key) override {
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Root> root_ptr, GetRoot(false));
    if (root_ptr == nullptr) return Absent("delete", key);
    const Root& root = *root_ptr;
    CKPT_RETURN_IF_ERROR_CTX(ValidateKey(key), root.Where("delete", key));
    auto [dir_path, name_view] = SplitKey(key);
    const std::string name(name_view);
    CKPT_ASSIGN_OR_RETURN(
        DirChain chain,
        WalkDirs(root, "delete", key, dir_path, Missing::kNotFound));
    const int parent = chain.parent(root);
    CKPT_RETURN_IF_ERROR(
        StatObject(root, "delete", key, parent, name).status());
    if (::unlinkat(parent, name.c_str(), 0) != 0) {
      if (errno == ENOENT) {
        return NotFoundError(root.Where("delete", key) + ": no such object");
      }
      return ErrnoError(errno, root.Where("delete", key) + ": unlink");
    }
    // Remove the directories this left empty, deepest first; rmdir fails
    // (ENOTEMPTY) at the first one still in use, which ends the pruning.
    // Only the deepest surviving directory needs an fsync: the removals
    // below it are entries in it.
    const std::vector<std::string> dirs = Components(dir_path);
    int deepest = parent;
    for (size_t i = dirs.size(); i > 0; --i) {
      const int up = i == 1 ? root.fd.get() : chain.dirs[i - 2].get();
      if (::unlinkat(up, dirs[i - 1].c_str(), AT_REMOVEDIR) != 0) break;
      deepest = up;
    }
    if (int err = FsyncFd(deepest)) {
      return ErrnoError(err, root.Where("delete", key) + ": fsync directory");
    }
    return Status();
  }

  std::optional<std::string> TemporaryOf(std::string_view key) const override {
    return TemporaryTarget(key);
  }

  // What a write killed before its first file leaves: an empty folder.
  Result<std::vector<std::string>> AbortIncompleteWrites(
      std::string_view prefix,
      const std::function<bool(const ObjectInfo&)>& dead) override {
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Root> root, GetRoot(false));
    if (root == nullptr) return std::vector<std::string>();
    return RemoveEmptyFolders(*root, prefix, dead);
  }

  Status CheckRoot() override {
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Root> root, GetRoot(false));
    if (root == nullptr) {
      return NotFoundError("root " + path_ + " does not exist");
    }
    return Status();
  }

 private:
  // The root's handle. While its directory does not exist (only for a root
  // opened with create_on_first_write), a write creates it and a read gets
  // null: the root reads as empty. Every read looks again, so a root that
  // another process created meanwhile is read.
  Result<std::shared_ptr<const Root>> GetRoot(bool write) {
    if (opened_.load(std::memory_order_acquire)) return root_;
    MutexLock lock(&mu_);
    if (root_ == nullptr) {
      Result<std::shared_ptr<const Root>> root = OpenRoot(url_, path_, write);
      if (!root.ok()) {
        if (!write && root.status().code() == ErrorCode::kNotFound) {
          return std::shared_ptr<const Root>();
        }
        return root.status();
      }
      root_ = *std::move(root);
      opened_.store(true, std::memory_order_release);
    }
    return root_;
  }

  Status Absent(std::string_view op, std::string_view key) const {
    return NotFoundError(std::string(op) + " " + Quote(key) + " in " + url_ +
                         ": no such object (the root " + path_ +
                         " does not exist)");
  }

  const std::string url_;
  const std::string path_;
  const bool local_reads_;
  Mutex mu_;
  // Set once, under mu_, before opened_ turns true; never changed after.
  std::shared_ptr<const Root> root_;
  std::atomic<bool> opened_{false};
};

}  // namespace
}  // namespace file

Result<std::unique_ptr<Storage>> OpenFileStorage(
    const ParsedUrl& url, const StorageOptions& options) {
  if (!url.host.empty() && url.host != "localhost") {
    return InvalidArgumentError(
        "URL " + Quote(url.url) + ": a file URL names a local path " +
        "(file:///path); host " + Quote(url.host) + " is not supported");
  }
  std::string path = url.path;
  if (url.url.find("://") != std::string::npos) {
    // A file URL's path is percent-encoded (RFC 8089: what Python's
    // Path.as_uri() writes, "a%20b" for "a b"); a plain path is taken as
    // it is.
    std::string decoded;
    for (size_t i = 0; i < path.size(); ++i) {
      if (path[i] != '%') {
        decoded += path[i];
        continue;
      }
      const auto hex = [](char c) {
        return std::isxdigit(static_cast<unsigned char>(c)) != 0;
      };
      if (i + 2 >= path.size() || !hex(path[i + 1]) || !hex(path[i + 2])) {
        return InvalidArgumentError(
            "URL " + Quote(url.url) +
            ": a '%' in a file URL starts an escape of two hex digits "
            "(\"%20\" is a space, \"%25\" a '%'; a plain path takes "
            "its characters as they are)");
      }
      const char c =
          static_cast<char>(std::stoi(path.substr(i + 1, 2), nullptr, 16));
      if (c == '\0') {
        return InvalidArgumentError("URL " + Quote(url.url) +
                                    ": %00 names no character of a path");
      }
      decoded += c;
      i += 2;
    }
    path = std::move(decoded);
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path.empty() || path.front() != '/') {
    return InvalidArgumentError("URL " + Quote(url.url) +
                                ": a file URL needs an absolute path");
  }
  std::shared_ptr<const file::Root> root;
  if (options.create && options.create_on_first_write) {
    // A read opens it once it exists; a write creates it.
    Result<std::shared_ptr<const file::Root>> opened =
        file::OpenRoot(url.url, path, false);
    if (opened.ok()) {
      root = *std::move(opened);
    } else if (opened.status().code() != ErrorCode::kNotFound) {
      return opened.status();
    }
  } else {
    CKPT_ASSIGN_OR_RETURN(root, file::OpenRoot(url.url, path, options.create));
  }
  return std::unique_ptr<Storage>(
      new file::FileStorage(url.url, path, std::move(root)));
}

}  // namespace ckpt
