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
#include <sys/mman.h>
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
    // Not "no such object": something is there, and what must not treat
    // the key as free (garbage collection of a step whose manifest this
    // is, a create-if-absent) needs to know it.
    return InvalidArgumentError(root.Where(op, key) + ": " + Quote(key) +
                                " is a directory or special file, not an "
                                "object (ckpt reads only regular files)");
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

namespace {

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif

// An object's pages, mapped read-only and shared: the page cache's own
// pages, so reading them twice costs no copy and no fresh memory. On a
// root held in memory the pages stay mapped until the view goes: they are
// the file's own memory, and mapping a tmpfs page costs more than reading
// it, so letting them go after the first read only to map them again for
// the second would cost more than both reads.
class MappedObject : public ObjectView {
 public:
  MappedObject(std::byte* addr, size_t size, bool keep_mapped)
      : addr_(addr), size_(size), keep_mapped_(keep_mapped) {}
  ~MappedObject() override {
    if (addr_ != nullptr) ::munmap(addr_, size_);
  }

  std::span<const std::byte> bytes() const override { return {addr_, size_}; }

  void Prefetch(uint64_t offset, uint64_t length) const override {
    auto [start, len] = Pages(offset, length);
    if (len > 0) ::madvise(addr_ + start, len, MADV_WILLNEED);
  }

  // Maps the range in with one call instead of a fault per few pages (a
  // kernel without MADV_POPULATE_READ gets the read-ahead hint instead).
  void WillRead(uint64_t offset, uint64_t length) const override {
    auto [start, len] = Pages(offset, length);
    if (len == 0) return;
    if (::madvise(addr_ + start, len, MADV_POPULATE_READ) != 0) {
      ::madvise(addr_ + start, len, MADV_WILLNEED);
    }
  }

  // Unmaps the range's pages from this process (they stay cached, and a
  // later access maps them again), so its resident memory holds only what
  // is being read.
  void DoneReading(uint64_t offset, uint64_t length) const override {
    if (keep_mapped_) return;
    auto [start, len] = Pages(offset, length);
    if (len > 0) ::madvise(addr_ + start, len, MADV_DONTNEED);
  }

 private:
  // The whole pages covering [offset, offset + length) within the mapping.
  std::pair<uint64_t, uint64_t> Pages(uint64_t offset, uint64_t length) const {
    static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    if (offset >= size_) return {0, 0};
    const uint64_t end = std::min<uint64_t>(size_, offset + length);
    const uint64_t start = offset / page * page;
    return {start, end - start};
  }

  std::byte* const addr_;
  const size_t size_;
  const bool keep_mapped_;
};

}  // namespace

Result<std::shared_ptr<const ObjectView>> ViewObject(const Root& root,
                                                     std::string_view key) {
  CKPT_ASSIGN_OR_RETURN(ScopedFd fd, OpenObject(root, "view", key));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return ErrnoError(errno, root.Where("view", key) + ": fstat");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    return std::shared_ptr<const ObjectView>(
        std::make_shared<const MappedObject>(nullptr, 0, false));
  }
  // The mapping keeps the file's pages reachable after the descriptor is
  // closed and after the object is deleted or replaced.
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (addr == MAP_FAILED) {
    return ErrnoError(errno, root.Where("view", key) + ": mmap");
  }
  return std::shared_ptr<const ObjectView>(std::make_shared<const MappedObject>(
      static_cast<std::byte*>(addr), size, root.in_memory));
}

}  // namespace ckpt::file
