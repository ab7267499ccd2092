// Copies of many buffers at the speed of the machine's cores, not one's.
//
// An asynchronous save stalls the caller for as long as the copy of its
// state into staging memory takes; one thread copies at 7-12 GB/s where the
// machine's cores together reach 3-5 times that. The copies are cut into
// slices of a few MiB and spread over a process-wide pool of
// hardware_concurrency() - 1 threads plus the calling one.
//
// Thread-safe: any number of threads may call ParallelCopy at once (they
// share the pool).
#pragma once

#include <cstddef>
#include <span>

#include "ckpt/status.h"

namespace ckpt {

struct CopyJob {
  std::byte* dst = nullptr;
  const std::byte* src = nullptr;
  size_t bytes = 0;
};

// Performs every job (dst and src of a job must not overlap) on up to
// `threads` threads (0: as many as the machine has cores). Returns once all
// are done.
Status ParallelCopy(std::span<const CopyJob> jobs, int threads = 0);

// The threads ParallelCopy uses when asked for 0.
int CopyThreads();

}  // namespace ckpt
