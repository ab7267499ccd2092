// What every handle on one file:// root shares, and how a key becomes open
// directories under it (file_root.cc). Every file is opened relative to the
// root's directory handle, one component at a time with O_NOFOLLOW, so no
// key leaves the root: not by "..", not by an absolute path, not by a
// symlink planted inside it. Internal to the backend.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckpt/status.h"
#include "util/names.h"

namespace ckpt::file {

// How often a writer walks again after a concurrent Delete removed the
// directory it was about to write into.
inline constexpr int kMaxWalkAttempts = 100;

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
  // Whether large reads and streamed writes try O_DIRECT. Not on a file
  // system held in memory (tmpfs, ramfs: a local tier under /dev/shm), which
  // takes O_DIRECT since Linux 6.6 but has no device behind it: its pages
  // are the data, so the aligned bounce block only added a copy per byte.
  bool direct_io = true;
  // Whether the root's file system holds its files in memory (tmpfs,
  // ramfs): their pages are the data itself.
  bool in_memory = false;
  // Whether streamed writes ask for 2 MiB pages (huge_pages.h): on tmpfs,
  // with $CKPT_TMPFS_HUGE_PAGES=1.
  bool huge_pages = false;

  // "put \"a/b\" in file:///data/run42" — the prefix of every message.
  std::string Where(std::string_view op, std::string_view key) const {
    return std::string(op) + " " + Quote(key) + " in " + url;
  }
};

inline int64_t MtimeMs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 +
         st.st_mtim.tv_nsec / 1000000;
}

// Splits "a/b/c" into {"a/b", "c"} and "c" into {"", "c"}.
std::pair<std::string_view, std::string_view> SplitKey(std::string_view key);

// "a/b/c" -> {"a", "b", "c"}.
std::vector<std::string> Components(std::string_view path);

inline int FsyncFd(int fd) { return ::fsync(fd) == 0 ? 0 : errno; }

// The refusal of a key that runs into a symlink at `link`.
Status SymlinkError(const Root& root, std::string_view op, std::string_view key,
                    std::string_view link);

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
                          Missing missing);

// Checks what is at `name` in `dir` before an object is read, replaced or
// removed there: a symlink is refused, a directory or special file is not
// an object. ENOENT is returned to the caller as NotFound.
Result<struct stat> StatObject(const Root& root, std::string_view op,
                               std::string_view key, int dir,
                               const std::string& name);

// Opens the root directory `path` of `url` (absolute, without a trailing
// '/'); with `create` a missing one is created with its parents (mkdir -p,
// fsyncing the parent of every directory it creates).
Result<std::shared_ptr<const Root>> OpenRoot(const std::string& url,
                                             const std::string& path,
                                             bool create);

}  // namespace ckpt::file
