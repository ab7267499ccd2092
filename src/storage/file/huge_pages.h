// 2 MiB pages for the objects a file:// root on tmpfs streams in (a local
// tier under /dev/shm), so that reading them back costs less.
//
// A restore from the memory tier is the kernel's copy out of tmpfs plus the
// checksum. With 4 KiB pages (tmpfs mounted without huge=, as /dev/shm is by
// default) that copy looks up and copies page by page, and a read back from
// 2 MiB pages is faster (figures: docs/benchmarks.md, "Figures behind the
// library's constants").
//
// madvise(MADV_COLLAPSE) (Linux 6.1) on a shared mapping of a tmpfs file
// makes the range's pages into 2 MiB ones whatever the mount's huge= says
// (shmem_enabled "deny" alone refuses). It copies the pages that hold data
// and clears the holes, so a writer readies the stretches ahead of its data:
// it sizes the file over them, writes one byte in each (a stretch of holes
// alone is not collapsed), collapses them, and then writes into the huge
// pages: a clear per byte instead of a copy. Each collapse drains every
// CPU's page lists first, so it readies far ahead (as far again as the file
// is long, at most kReadyAhead), and cuts the file back to its size at the
// end. Written so, the files take no longer to write than with small pages
// once memory is not fragmented (the first time, the kernel compacts it).
//
// Asked for only with $CKPT_TMPFS_HUGE_PAGES=1. The price is in the
// background: the kernel clears each 2 MiB page before the write, and on a
// virtual machine that hands free memory back to its host (virtio-balloon
// free page reporting, which takes free 2 MiB blocks after 2 s) each one
// then costs the host a fault too. On such a virtual machine the local
// tier's background work after an idle pause took twice as long, while on
// a 16-core machine the restore gained nothing (docs/benchmarks.md): it
// pays only where few cores copy and restores are worth more than saves.
//
// Nothing here changes what a file holds once written. A refusal (an older
// kernel, no contiguous memory) only leaves the small pages; after one the
// writer stops asking for that file, and after EINVAL (no MADV_COLLAPSE) no
// writer asks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ckpt::file {

inline constexpr uint64_t kHugePage = uint64_t{2} << 20;

// Whether writes to tmpfs roots ask for 2 MiB pages: when
// $CKPT_TMPFS_HUGE_PAGES is "1", until the kernel said it cannot.
bool HugePagesAllowed();

// A read-only shared mapping of `length` bytes of the file `fd` from
// `offset` (a multiple of kHugePage), placed on a 2 MiB boundary: only such
// a mapping can hold the file's 2 MiB pages. Unmapped when destroyed;
// data() is null when it could not be made.
class AlignedFileMapping {
 public:
  AlignedFileMapping(int fd, uint64_t offset, size_t length);
  ~AlignedFileMapping();
  AlignedFileMapping(const AlignedFileMapping&) = delete;
  AlignedFileMapping& operator=(const AlignedFileMapping&) = delete;

  char* data() const { return data_; }

 private:
  void* reserved_ = nullptr;  // the address space reserved around it
  size_t reserved_length_ = 0;
  char* data_ = nullptr;
};

// Follows one file being written front to back (through a descriptor open
// for reading and writing) and gives it huge pages ahead of its data. Not
// thread-safe: one per writer.
class HugePageWriter {
 public:
  static constexpr uint64_t kReadyAhead = uint64_t{32} << 20;

  explicit HugePageWriter(int fd) : fd_(fd) {}

  // Before `length` bytes are written at `offset` (the file's data so far).
  void Before(uint64_t offset, uint64_t length);

  // Once all `size` bytes are written: cuts off what was readied past them
  // (also after a refusal). Returns 0 or ftruncate's errno.
  int Finish(uint64_t size);

 private:
  // Collapses [begin, end) (multiples of kHugePage) of the file.
  void Collapse(uint64_t begin, uint64_t end);

  const int fd_;
  bool active_ = true;
  uint64_t readied_ = 0;  // the file's size as readied (0: none yet)
};

}  // namespace ckpt::file
