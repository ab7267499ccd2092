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
// Stat and Delete are here. Delete unlinks NAME, then removes directories
// left empty up to (not including) the root, and fsyncs the deepest
// directory that remains.
#include "storage/file/file_storage.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "storage/file/file_list.h"
#include "storage/file/file_read.h"
#include "storage/file/file_root.h"
#include "storage/file/file_writable.h"
#include "util/names.h"

namespace ckpt {
namespace file {
namespace {

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
    return NewFileWritable(root_, key);
  }

  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override {
    return PutFile(root_, key, data, mode);
  }

  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    return ReadObjectRange(*root_, key, offset, out);
  }

  Status ReadRangeFilling(std::string_view key, uint64_t offset,
                          std::span<std::byte> out,
                          const FilledFn& filled) override {
    return ReadObjectRange(*root_, key, offset, out, &filled);
  }

  Result<std::string> ReadAll(std::string_view key) override {
    return ReadObject(*root_, key);
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
    return ListObjects(*root_, prefix);
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

  std::optional<std::string> TemporaryOf(std::string_view key) const override {
    return TemporaryTarget(key);
  }

 private:
  const std::shared_ptr<const Root> root_;
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
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path.empty() || path.front() != '/') {
    return InvalidArgumentError("URL " + Quote(url.url) +
                                ": a file URL needs an absolute path");
  }
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const file::Root> root,
                        file::OpenRoot(url.url, path, options.create));
  return std::unique_ptr<Storage>(new file::FileStorage(std::move(root)));
}

}  // namespace ckpt
