// Copies of many buffers at the speed of the machine's cores, not one's.
//
// An asynchronous save stalls the caller for as long as the copy of its
// state into staging memory takes, and one thread copies at a fraction of
// what the machine's cores reach together. The copies are cut into
// slices of a few MiB and spread over a process-wide pool of
// hardware_concurrency() - 1 threads plus the calling one.
//
// A copy of kStreamingCopyFrom bytes or more in all stores past the caches.
// memcpy does so by itself for one large enough buffer, but not for the
// slices, whose copy through the caches is slower than streamed (figures:
// docs/benchmarks.md). A state that large is not read again while it is in
// the cache.
//
// Thread-safe: any number of threads may call ParallelCopy at once (they
// share the pool).
#pragma once

#include <cstddef>
#include <span>

#include "ckpt/status.h"

namespace ckpt {

inline constexpr size_t kStreamingCopyFrom = size_t{32} << 20;

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
