#include "util/parallel_copy.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "util/thread_pool.h"

namespace ckpt {
namespace {

// Large enough that handing a slice to a thread costs nothing beside its
// copy (a few microseconds against ~0.5 ms), small enough that the slices
// of a large tensor keep every thread busy to the end.
constexpr size_t kSlice = size_t{4} << 20;

// Below this the pool's hand-off costs more than the copy gains.
constexpr size_t kParallelFrom = size_t{8} << 20;

struct Slice {
  const CopyJob* job;
  size_t offset;
  size_t bytes;
};

ThreadPool* CopyPool() {
  // Made once and kept to the end of the process: the staging copy of
  // every later save reuses its threads.
  static ThreadPool* pool = [] {
    const int helpers = CopyThreads() - 1;
    return helpers > 0 ? new ThreadPool(helpers) : nullptr;
  }();
  return pool;
}

}  // namespace

int CopyThreads() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

Status ParallelCopy(std::span<const CopyJob> jobs, int threads) {
  size_t total = 0;
  for (const CopyJob& j : jobs) total += j.bytes;
  if (threads <= 0) threads = CopyThreads();
  if (threads == 1 || total < kParallelFrom) {
    for (const CopyJob& j : jobs) {
      if (j.bytes > 0) std::memcpy(j.dst, j.src, j.bytes);
    }
    return Status();
  }
  std::vector<Slice> slices;
  slices.reserve(total / kSlice + jobs.size());
  for (const CopyJob& j : jobs) {
    for (size_t at = 0; at < j.bytes; at += kSlice) {
      slices.push_back(Slice{&j, at, std::min(kSlice, j.bytes - at)});
    }
  }
  return ParallelFor(CopyPool(), threads, slices.size(), [&](size_t i) {
    const Slice& s = slices[i];
    std::memcpy(s.job->dst + s.offset, s.job->src + s.offset, s.bytes);
    return Status();
  });
}

}  // namespace ckpt
