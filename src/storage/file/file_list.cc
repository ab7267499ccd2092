// Listing a file:// root. The walk of file_root.h opens the directory that
// holds the prefix's last component (a missing one, or a symlink, holds no
// objects); from there every regular file whose name starts with that
// component is an object, and every such directory is read recursively,
// each through a fresh handle opened with O_NOFOLLOW. Symlinks, special
// files and names no key can have are skipped, and so are entries that
// vanish while we look. Temporary files are listed like any object, so
// garbage collection can remove those a crash left behind.
#include "storage/file/file_list.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>

#include "util/names.h"

namespace ckpt::file {
namespace {

// Appends the objects under `dir` (whose keys start with `key_prefix`) to
// `out`, recursively; at this level only names starting with `name_prefix`.
// Symlinks and special files are skipped; entries that vanish while we
// look are skipped too.
Status ListDir(const Root& root, std::string_view prefix, int dir,
               const std::string& key_prefix, std::string_view name_prefix,
               std::vector<ObjectInfo>* out) {
  auto fail = [&](int err, std::string_view what) {
    return ErrnoError(err, root.Where("list", prefix) + ": " +
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
        // The directory that cannot be opened, by name (a step's, whose
        // mode someone changed), not only the one that holds it.
        const int err = errno;
        return ErrnoError(
            err, root.Where("list", prefix) + ": open directory " + Quote(key));
      }
      ScopedFd owned(child);
      CKPT_RETURN_IF_ERROR(ListDir(root, prefix, child, key + "/", "", out));
    }
  }
  return Status();
}

}  // namespace

Result<std::vector<ObjectInfo>> ListObjects(const Root& root,
                                            std::string_view prefix) {
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
      WalkDirs(root, "list", prefix, dir_path, Missing::kNotFound);
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
      ListDir(root, prefix, chain->parent(root), key_prefix, leaf, &out));
  std::sort(
      out.begin(), out.end(),
      [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return out;
}

Result<std::vector<std::string>> RemoveEmptyFolders(
    const Root& root, std::string_view prefix,
    const std::function<bool(const ObjectInfo&)>& dead) {
  std::vector<std::string> removed;
  if (prefix.find('/') != std::string_view::npos) return removed;
  Result<DirChain> chain =
      WalkDirs(root, "list", prefix, "", Missing::kNotFound);
  if (!chain.ok()) return removed;  // no root yet: nothing in it
  const int top = chain->parent(root);
  const int fd = ::openat(top, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return ErrnoError(errno, root.Where("list", prefix) + ": open the root");
  }
  DIR* stream = ::fdopendir(fd);
  if (stream == nullptr) {
    const int err = errno;
    ::close(fd);
    return ErrnoError(err, root.Where("list", prefix) + ": read the root");
  }
  std::unique_ptr<DIR, int (*)(DIR*)> closer(stream, ::closedir);
  std::vector<std::string> names;
  for (const dirent* e = ::readdir(stream); e != nullptr;
       e = ::readdir(stream)) {
    const std::string_view name = e->d_name;
    if (name.starts_with(prefix) && name != "." && name != ".." &&
        ValidateKey(name).ok()) {
      names.emplace_back(name);
    }
  }
  for (const std::string& name : names) {
    const int child = ::openat(fd, name.c_str(),
                               O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (child < 0) continue;  // a file, a link, or gone
    ScopedFd owned(child);
    struct stat st;
    DIR* inner = ::fdopendir(::dup(child));
    if (inner == nullptr || ::fstat(child, &st) != 0) {
      if (inner != nullptr) ::closedir(inner);
      continue;
    }
    bool empty = true;
    for (const dirent* e = ::readdir(inner); e != nullptr && empty;
         e = ::readdir(inner)) {
      const std::string_view n = e->d_name;
      empty = n == "." || n == "..";
    }
    ::closedir(inner);
    if (!empty || !dead(ObjectInfo{name + "/", 0, MtimeMs(st)})) continue;
    // rmdir fails (ENOTEMPTY) where a file came in since: it stays.
    if (::unlinkat(fd, name.c_str(), AT_REMOVEDIR) == 0) {
      removed.push_back(name + "/");
    }
  }
  return removed;
}

}  // namespace ckpt::file
