// The walk from a file:// root's directory handle down to the directory of
// a key, which every call begins with, and the opening of the root itself.
//
// A walk opens each directory of a key with openat(parent, name,
// O_DIRECTORY|O_NOFOLLOW) from the root's handle down. A writer creates
// what is missing (mkdirat, then an fsync of the parent, so the new name
// survives a crash) and opens it again; EEXIST there is another writer
// having made it, and a directory removed between the mkdirat and the open
// (a concurrent Delete pruning it) is made again. Where an open fails, an
// fstatat without following tells a symlink (refused, never followed) from a
// missing directory (NotFound for a reader) and from an object in a
// directory's place.
#include "storage/file/file_root.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/vfs.h>

#include <algorithm>

#include "storage/file/direct_writer.h"
#include "storage/file/huge_pages.h"

namespace ckpt::file {

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

Status SymlinkError(const Root& root, std::string_view op, std::string_view key,
                    std::string_view link) {
  return InvalidArgumentError(root.Where(op, key) + ": " + Quote(link) +
                              " is a symbolic link, and links inside the root "
                              "are never followed");
}

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
    // Not "no such object": something is there, and what must not treat
    // the key as free (garbage collection of a step whose manifest this
    // is, a create-if-absent) needs to know it.
    return InvalidArgumentError(root.Where(op, key) + ": " + Quote(key) +
                                " is a directory or special file, not an "
                                "object (ckpt reads only regular files)");
  }
  return st;
}

namespace {

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

// The file system type of the directory `fd`, or 0.
decltype(statfs::f_type) FileSystemType(int fd) {
  struct statfs fs;
  if (::fstatfs(fd, &fs) != 0) return 0;
  return fs.f_type;
}

}  // namespace

Result<std::shared_ptr<const Root>> OpenRoot(const std::string& url,
                                             const std::string& path,
                                             bool create) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return ErrnoError(errno, "open " + url + ": stat " + Quote(path));
    }
    if (!create) {
      return NotFoundError("open " + url + ": directory " + Quote(path) +
                           " does not exist");
    }
    CKPT_RETURN_IF_ERROR(MakeDirs(url, path));
  } else if (!S_ISDIR(st.st_mode)) {
    return InvalidArgumentError("open " + url + ": " + Quote(path) +
                                " exists and is not a directory");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return ErrnoError(errno, "open " + url + ": open directory " + Quote(path));
  }
  auto root = std::make_shared<Root>();
  root->url = url;
  root->fd = ScopedFd(fd);
  const auto type = FileSystemType(fd);
  root->in_memory = type == TMPFS_MAGIC || type == RAMFS_MAGIC;
  root->direct_io = DirectIoAllowed() && !root->in_memory;
  root->huge_pages = type == TMPFS_MAGIC && HugePagesAllowed();
  return std::shared_ptr<const Root>(std::move(root));
}

}  // namespace ckpt::file
