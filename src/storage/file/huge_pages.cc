#include "storage/file/huge_pages.h"

#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; older headers lack the name
#endif

namespace ckpt::file {
namespace {

// Cleared when the kernel refuses the first collapse with EINVAL (no
// MADV_COLLAPSE, or shmem_enabled "deny"), so no writer asks again; once
// one has worked, an EINVAL is about that file alone.
std::atomic<bool> g_kernel_collapses{true};
std::atomic<bool> g_collapsed_once{false};

uint64_t RoundUp(uint64_t x) {
  return (x + kHugePage - 1) / kHugePage * kHugePage;
}
uint64_t RoundDown(uint64_t x) { return x / kHugePage * kHugePage; }

}  // namespace

bool HugePagesAllowed() {
  const char* v = std::getenv("CKPT_TMPFS_HUGE_PAGES");
  return v != nullptr && std::strcmp(v, "1") == 0 &&
         g_kernel_collapses.load(std::memory_order_relaxed);
}

void HugePageWriter::Before(uint64_t offset, uint64_t length) {
  const uint64_t end = offset + length;
  // A file under 2 MiB (a manifest, a small share) keeps its small pages.
  if (!active_ || end < kHugePage || end <= readied_) return;
  const uint64_t from = RoundDown(std::max(offset, readied_));
  uint64_t to = RoundUp(end + std::min(end, kReadyAhead));
  // The stretches ahead hold memory of the file system until Finish: only
  // where it has room for them twice over, so that they never cost a write
  // that would fit (this one's, or another writer's).
  struct statfs fs;
  if (::fstatfs(fd_, &fs) != 0 ||
      static_cast<uint64_t>(fs.f_bavail) * fs.f_bsize < 2 * (to - offset)) {
    to = RoundDown(end);
    if (to <= from) return;
  }
  if (::ftruncate(fd_, static_cast<off_t>(to)) != 0) {
    active_ = false;
    return;
  }
  readied_ = to;
  // A new stretch with no data yet gets one zero byte, which the data's
  // write overwrites; the one the data ends in has its pages. A failure
  // (the file system full of the stretches ahead) only ends the asking: the
  // data's own write says whether it fits.
  static const char kZero = 0;
  for (uint64_t at = std::max(RoundUp(offset), from); at < to;
       at += kHugePage) {
    ssize_t n;
    do {
      n = ::pwrite(fd_, &kZero, 1, static_cast<off_t>(at));
    } while (n < 0 && errno == EINTR);
    if (n != 1) {
      active_ = false;
      return;
    }
  }
  Collapse(from, to);
}

int HugePageWriter::Finish(uint64_t size) {
  if (readied_ <= size) return 0;
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return errno;
  readied_ = size;
  return 0;
}

void HugePageWriter::Collapse(uint64_t begin, uint64_t end) {
  if (!active_ || begin >= end) return;
  const size_t len = static_cast<size_t>(end - begin);
  AlignedFileMapping map(fd_, begin, len);
  if (map.data() == nullptr) {
    active_ = false;
  } else if (::madvise(map.data(), len, MADV_COLLAPSE) != 0) {
    // EAGAIN is passing (a page locked a moment); anything else (no
    // contiguous memory, tmpfs full) would cost the same again.
    if (errno == EINVAL && !g_collapsed_once.load()) {
      g_kernel_collapses.store(false, std::memory_order_relaxed);
    }
    if (errno != EAGAIN) active_ = false;
  } else {
    g_collapsed_once.store(true, std::memory_order_relaxed);
  }
}

AlignedFileMapping::AlignedFileMapping(int fd, uint64_t offset, size_t length) {
  // Reserve 2 MiB more address space than needed and map inside it.
  void* reserved = ::mmap(nullptr, length + kHugePage, PROT_NONE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) return;
  reserved_ = reserved;
  reserved_length_ = length + kHugePage;
  const uintptr_t at = (reinterpret_cast<uintptr_t>(reserved) + kHugePage - 1) &
                       ~static_cast<uintptr_t>(kHugePage - 1);
  void* map = ::mmap(reinterpret_cast<void*>(at), length, PROT_READ,
                     MAP_SHARED | MAP_FIXED, fd, static_cast<off_t>(offset));
  if (map != MAP_FAILED) data_ = static_cast<char*>(map);
}

AlignedFileMapping::~AlignedFileMapping() {
  // The file's mapping lies inside the reservation: one munmap ends both.
  if (reserved_ != nullptr) ::munmap(reserved_, reserved_length_);
}

}  // namespace ckpt::file
