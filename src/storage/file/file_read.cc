// Reads from a file:// root. An object is opened through the walk of
// file_root.h with O_NOFOLLOW (a symlink is refused) and O_NONBLOCK (a FIFO
// planted in the root cannot block the open), and must be a regular file.
// Its size comes from fstat of that one open file, so a range past the end
// is DataLoss before any byte is read.
//
// Reads of 1 MiB and more use O_DIRECT ($CKPT_FILE_DIRECT_IO=0: never),
// through a pooled aligned block (direct_writer.h); smaller ones, roots on a
// file system held in memory (Root::direct_io) and file systems without
// O_DIRECT go through the page cache.
#include "storage/file/file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "storage/file/direct_writer.h"

namespace ckpt::file {
namespace {

// Reads of at least this many bytes (the slabs of a load) bypass the page
// cache: a checkpoint is read once, so the cache only adds a copy, and cold
// O_DIRECT reads outran buffered ones (docs/benchmarks.md, "Figures behind
// the library's constants").
constexpr uint64_t kDirectReadMin = uint64_t{1} << 20;

// ReadRangeFilling hands its bytes over this many at a time: small enough
// to be still in a core's cache when the caller checksums them (a read
// and checksum in 256 KiB pieces beats one in 8 MiB pieces: docs/
// benchmarks.md, "Figures behind the library's constants"), large enough
// that the extra preads cost little.
constexpr size_t kFilledPiece = size_t{256} << 10;

// Opens an object for reading, refusing symlinks and non-files. O_NONBLOCK
// keeps a FIFO planted in the root from blocking the open.
Result<ScopedFd> OpenObject(const Root& root, std::string_view op,
                            std::string_view key) {
  CKPT_RETURN_IF_ERROR_CTX(ValidateKey(key), root.Where(op, key));
  auto [dir_path, name_view] = SplitKey(key);
  const std::string name(name_view);
  CKPT_ASSIGN_OR_RETURN(DirChain chain,
                        WalkDirs(root, op, key, dir_path, Missing::kNotFound));
  const int fd = ::openat(chain.parent(root), name.c_str(),
                          O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ELOOP) return SymlinkError(root, op, key, key);
    if (errno == ENOENT) {
      return NotFoundError(root.Where(op, key) + ": no such object");
    }
    return ErrnoError(errno, root.Where(op, key) + ": open");
  }
  ScopedFd owned(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return ErrnoError(errno, root.Where(op, key) + ": fstat");
  }
  if (!S_ISREG(st.st_mode)) {
    return NotFoundError(root.Where(op, key) +
                         ": no such object (a directory or special file is "
                         "in its place)");
  }
  return owned;
}

// Reads the front of `out` at `offset` with O_DIRECT, in aligned pieces
// through a pooled block, advancing both past what it read. Where the file
// system refuses O_DIRECT or no block can be had it reads nothing (or
// stops), and the caller reads the rest through the page cache.
Status ReadDirect(const Root& root, std::string_view key, int fd,
                  uint64_t& offset, std::span<std::byte>& out,
                  const Storage::FilledFn* filled) {
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
    const uint64_t want =
        std::min<uint64_t>(DirectWriter::kBlock,
                           (skip + out.size() + kAlign - 1) / kAlign * kAlign);
    const ssize_t n = ::pread(fd, block, want, static_cast<off_t>(start));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL) break;  // no O_DIRECT here after all
    if (n < 0) {
      status = ErrnoError(errno, root.Where("read", key) +
                                     ": pread (O_DIRECT) at offset " +
                                     std::to_string(start));
      break;
    }
    if (static_cast<uint64_t>(n) <= skip) break;  // the end: ReadFully says
    const size_t got =
        std::min<uint64_t>(static_cast<uint64_t>(n) - skip, out.size());
    if (filled == nullptr) {
      std::memcpy(out.data(), block + skip, got);
    } else {
      // Hand each piece over while it is in the cache.
      for (size_t at = 0; at < got; at += kFilledPiece) {
        const size_t len = std::min<size_t>(kFilledPiece, got - at);
        std::memcpy(out.data() + at, block + skip + at, len);
        (*filled)(std::span<const std::byte>(out.data() + at, len));
      }
    }
    out = out.subspan(got);
    offset += got;
  }
  ReleaseDirectBlock(block);
  ::fcntl(fd, F_SETFL, flags);
  return status;
}

Status ReadFully(const Root& root, std::string_view op, std::string_view key,
                 int fd, uint64_t offset, std::span<std::byte> out,
                 const Storage::FilledFn* filled = nullptr) {
  while (!out.empty()) {
    const size_t want = filled == nullptr
                            ? out.size()
                            : std::min<size_t>(out.size(), kFilledPiece);
    const ssize_t n = ::pread(fd, out.data(), want, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, root.Where(op, key) + ": pread at offset " +
                                   std::to_string(offset));
    }
    if (n == 0) {
      return DataLossError(root.Where(op, key) +
                           ": the object ends at offset " +
                           std::to_string(offset) + ", before the " +
                           std::to_string(out.size()) +
                           " more bytes asked for (truncated under us?)");
    }
    if (filled != nullptr) {
      (*filled)(std::span<const std::byte>(out.data(), static_cast<size_t>(n)));
    }
    out = out.subspan(static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  return Status();
}

}  // namespace

Status ReadObjectRange(const Root& root, std::string_view key, uint64_t offset,
                       std::span<std::byte> out,
                       const Storage::FilledFn* filled) {
  CKPT_ASSIGN_OR_RETURN(ScopedFd fd, OpenObject(root, "read", key));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return ErrnoError(errno, root.Where("read", key) + ": fstat");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (offset > size || out.size() > size - offset) {
    return DataLossError(
        root.Where("read", key) + ": " + std::to_string(out.size()) +
        " bytes at offset " + std::to_string(offset) +
        " run past the end of the object (" + std::to_string(size) + " bytes)");
  }
  if (out.size() >= kDirectReadMin && root.direct_io) {
    CKPT_RETURN_IF_ERROR(ReadDirect(root, key, fd.get(), offset, out, filled));
  }
  return ReadFully(root, "read", key, fd.get(), offset, out, filled);
}

Result<std::string> ReadObject(const Root& root, std::string_view key) {
  CKPT_ASSIGN_OR_RETURN(ScopedFd fd, OpenObject(root, "read", key));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return ErrnoError(errno, root.Where("read", key) + ": fstat");
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  CKPT_RETURN_IF_ERROR(
      ReadFully(root, "read", key, fd.get(), 0,
                std::span<std::byte>(reinterpret_cast<std::byte*>(out.data()),
                                     out.size())));
  return out;
}

}  // namespace ckpt::file
