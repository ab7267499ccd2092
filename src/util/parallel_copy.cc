#include "util/parallel_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "util/thread_pool.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ckpt {
namespace {

// Large enough that handing a slice to a thread costs nothing beside its
// copy (the hand-off is a queue push and a wake-up; the copy of 4 MiB is
// hundreds of times longer), small enough that the slices of a large
// tensor keep every thread busy to the end.
constexpr size_t kSlice = size_t{4} << 20;

// Below this the pool's hand-off costs more than the copy gains.
constexpr size_t kParallelFrom = size_t{8} << 20;

// memcpy of dst[0, n) from src with stores that bypass the caches (SSE2,
// in every x86-64 CPU; elsewhere plain memcpy), fenced, so that the bytes
// are visible to whichever thread next takes a lock.
void StreamingCopy(std::byte* dst, const std::byte* src, size_t n) {
#if defined(__SSE2__)
  // Streaming stores want 16-byte-aligned targets: the head plainly.
  const size_t head =
      std::min<size_t>(n, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  const size_t body = n / 64 * 64;
  for (size_t i = 0; i < body; i += 64) {
    const __m128i a =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + body, src + body, n - body);
  // Streaming stores are not ordered with later ones: without the fence a
  // thread that sees this slice marked done could still read old bytes.
  _mm_sfence();
#else
  std::memcpy(dst, src, n);
#endif
}

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
  const bool streaming = total >= kStreamingCopyFrom;
  auto copy = [streaming](std::byte* dst, const std::byte* src, size_t n) {
    if (streaming) {
      StreamingCopy(dst, src, n);
    } else {
      std::memcpy(dst, src, n);
    }
  };
  if (threads == 1 || total < kParallelFrom) {
    for (const CopyJob& j : jobs) {
      if (j.bytes > 0) copy(j.dst, j.src, j.bytes);
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
    copy(s.job->dst + s.offset, s.job->src + s.offset, s.bytes);
    return Status();
  });
}

}  // namespace ckpt
