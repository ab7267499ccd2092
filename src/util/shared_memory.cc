#include "util/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <future>
#include <system_error>
#include <utility>

namespace ckpt {

namespace {

constexpr std::string_view kPrefix = "/ckpt-read-once-";
constexpr size_t kTokenDigits = 32;
// Reserve's piece (see there).
constexpr uint64_t kReservePiece = uint64_t{8} << 20;

std::string Hex(const unsigned char* bytes, size_t n) {
  std::string out;
  char two[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(two, sizeof(two), "%02x", bytes[i]);
    out += two;
  }
  return out;
}

bool IsHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Result<std::string> Random(size_t bytes) {
  unsigned char buf[32];
  if (bytes > sizeof(buf))
    return InvalidArgumentError("shared memory: token size");
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::getrandom(buf + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return IOError(std::string("shared memory: no random bytes (") +
                     std::strerror(errno) + ")");
    }
    got += static_cast<size_t>(n);
  }
  return Hex(buf, bytes);
}

// The token at `size`, past the memory the processes share.
Status WriteToken(int fd, uint64_t size, const std::string& token) {
  const ssize_t n =
      ::pwrite(fd, token.data(), token.size(), static_cast<off_t>(size));
  if (n != static_cast<ssize_t>(token.size())) {
    return IOError("shared memory: cannot write its token");
  }
  return Status();
}

// Takes the pages of bytes [offset, offset + length) of the file `fd`, a
// piece at a time: the file system holds the file's lock through one call,
// and the other processes of the node reserve what they write (or remove
// the name) meanwhile.
Status Allocate(int fd, const std::string& name, uint64_t offset,
                uint64_t length) {
  for (uint64_t at = offset; at < offset + length; at += kReservePiece) {
    const uint64_t n = std::min(kReservePiece, offset + length - at);
    const int rc =
        ::posix_fallocate(fd, static_cast<off_t>(at), static_cast<off_t>(n));
    if (rc != 0) {
      return IOError("shared memory " + name + ": no room for bytes " +
                     std::to_string(at) + " to " + std::to_string(at + n) +
                     " (" + std::strerror(rc) + ")");
    }
  }
  return Status();
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack the name
#endif

// Allocate, then each piece's pages made ready to write: tmpfs hands out
// a reserved page unmade and makes it (clears it) at its first touch, so
// without this the node's memory was made page by page as the messages
// of the exchange landed in it, on the exchange's time. On a VM whose
// host takes freed memory back, making a page is the host backing it
// anew, about a second a GiB on this project's 2-core VM
// (docs/benchmarks.md); done here, it runs beside the ranks' reads.
// MADV_POPULATE_WRITE keeps what the node's ranks have written meanwhile;
// where it is missing (Linux before 5.14) the pages are made as before.
Status AllocateAndMake(int fd, const std::string& name, uint64_t size) {
  void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  Status status;
  for (uint64_t at = 0; at < size && status.ok(); at += kReservePiece) {
    const uint64_t n = std::min(kReservePiece, size - at);
    status = Allocate(fd, name, at, n);
    if (status.ok() && map != MAP_FAILED &&
        ::madvise(static_cast<char*>(map) + at, n, MADV_POPULATE_WRITE) != 0) {
      ::munmap(map, size);
      map = MAP_FAILED;
    }
  }
  if (map != MAP_FAILED) ::munmap(map, size);
  return status;
}

}  // namespace

Result<SharedMemoryFile> SharedMemoryFile::Create(uint64_t size) {
  CKPT_ASSIGN_OR_RETURN(std::string token, Random(kTokenDigits / 2));
  CKPT_ASSIGN_OR_RETURN(std::string suffix, Random(kTokenDigits / 2));
  const std::string name = std::string(kPrefix) + suffix;
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    return IOError("shared memory " + name + ": cannot create it (" +
                   std::strerror(errno) + ")");
  }
  SharedMemoryFile file(fd, name, token, /*owner=*/true, size);
  // Room checked now, the pages taken later (Reserve), where each process
  // writes them: a write to a page the file system has no room for would
  // end the process (SIGBUS), and a container's /dev/shm is often small.
  const uint64_t total = size + kTokenDigits;
  struct statvfs fs {};
  if (::fstatvfs(fd, &fs) == 0 &&
      total / fs.f_frsize >= static_cast<uint64_t>(fs.f_bavail)) {
    return IOError("shared memory " + name + ": no room for " +
                   std::to_string(total) + " bytes (" +
                   std::to_string(fs.f_bavail * fs.f_frsize) + " free)");
  }
  // The token's page is the only one written now; it sets the file's size.
  CKPT_RETURN_IF_ERROR(WriteToken(fd, size, token));
  return file;
}

Result<SharedMemoryFile> SharedMemoryFile::Open(std::string_view invitation,
                                                uint64_t size) {
  // "<name> <token>", both as Create makes them: nothing else is opened.
  const size_t space = invitation.find(' ');
  const std::string_view name = invitation.substr(0, space);
  const std::string_view token = space == std::string_view::npos
                                     ? std::string_view()
                                     : invitation.substr(space + 1);
  if (name.size() != kPrefix.size() + kTokenDigits ||
      name.substr(0, kPrefix.size()) != kPrefix ||
      !IsHex(name.substr(kPrefix.size())) || token.size() != kTokenDigits ||
      !IsHex(token)) {
    return InvalidArgumentError("shared memory: not an invitation to a file");
  }
  const std::string n(name);
  const int fd = ::shm_open(n.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return NotFoundError("shared memory " + n + ": cannot open it (" +
                         std::strerror(errno) + ")");
  }
  SharedMemoryFile file(fd, n, std::string(token), /*owner=*/false, size);
  struct stat st {};
  std::string got(kTokenDigits, '\0');
  if (::fstat(fd, &st) != 0 ||
      static_cast<uint64_t>(st.st_size) != size + kTokenDigits ||
      ::pread(fd, got.data(), got.size(), static_cast<off_t>(size)) !=
          static_cast<ssize_t>(got.size()) ||
      got != token) {
    return NotFoundError("shared memory " + n +
                         ": not the file it was invited to");
  }
  return file;
}

SharedMemoryFile::SharedMemoryFile(SharedMemoryFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      name_(std::move(other.name_)),
      token_(std::move(other.token_)),
      owner_(std::exchange(other.owner_, false)),
      size_(other.size_),
      reserving_(std::move(other.reserving_)) {}

SharedMemoryFile& SharedMemoryFile::operator=(
    SharedMemoryFile&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = std::exchange(other.fd_, -1);
    name_ = std::move(other.name_);
    token_ = std::move(other.token_);
    owner_ = std::exchange(other.owner_, false);
    size_ = other.size_;
    reserving_ = std::move(other.reserving_);
  }
  return *this;
}

SharedMemoryFile::~SharedMemoryFile() { Close(); }

void SharedMemoryFile::Close() {
  // The reservation uses the descriptor: done before it is closed (or its
  // number reused).
  if (reserving_.valid()) reserving_.wait();
  reserving_ = std::future<Status>();
  Unlink();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status SharedMemoryFile::Reserve(uint64_t offset, uint64_t length) const {
  if (offset > size_ || length > size_ - offset) {
    return InvalidArgumentError(
        "shared memory " + name_ + ": bytes " + std::to_string(offset) +
        " to " + std::to_string(offset + length) + " lie past its end");
  }
  return Allocate(fd_, name_, offset, length);
}

void SharedMemoryFile::ReserveAllInBackground() {
  if (fd_ < 0 || reserving_.valid()) return;
  // By value: the file may move meanwhile (Close waits for this).
  try {
    reserving_ =
        std::async(std::launch::async, [fd = fd_, name = name_, size = size_] {
          return AllocateAndMake(fd, name, size);
        });
  } catch (const std::system_error&) {
    // No thread to be had: taken here, before anything is written.
    std::promise<Status> now;
    now.set_value(AllocateAndMake(fd_, name_, size_));
    reserving_ = now.get_future();
  }
}

Status SharedMemoryFile::WaitReserved() {
  if (!reserving_.valid()) return Status();
  return reserving_.get();
}

std::string SharedMemoryFile::Invitation() const {
  return name_ + " " + token_;
}

void SharedMemoryFile::Unlink() {
  if (!owner_) return;
  ::shm_unlink(name_.c_str());
  owner_ = false;
}

namespace {

// The lock on byte `which` past the memory and its token.
struct flock LockOf(uint64_t size, int which, short type) {
  struct flock l {};
  l.l_type = type;
  l.l_whence = SEEK_SET;
  l.l_start = static_cast<off_t>(size + 2 * kTokenDigits + which);
  l.l_len = 1;
  return l;
}

}  // namespace

bool SharedMemoryFile::Lock(int which, bool exclusive, bool wait) {
  if (fd_ < 0) return false;
  struct flock l = LockOf(size_, which, exclusive ? F_WRLCK : F_RDLCK);
  for (;;) {
    if (::fcntl(fd_, wait ? F_OFD_SETLKW : F_OFD_SETLK, &l) == 0) return true;
    if (errno != EINTR) return false;
  }
}

void SharedMemoryFile::Unlock(int which) {
  if (fd_ < 0) return;
  struct flock l = LockOf(size_, which, F_UNLCK);
  ::fcntl(fd_, F_OFD_SETLK, &l);
}

}  // namespace ckpt
