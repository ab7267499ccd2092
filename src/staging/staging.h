// Staging memory for asynchronous saves: a copy of the caller's state that
// the background save writes from while the caller changes its tensors; and
// for all-or-nothing loads, which read and check every chunk in it before
// copying into the caller's tensors (ReserveForReads).
//
// The memory is allocated once and reused by every later save and load
// (grown only when a larger state comes): touching fresh pages costs far
// more than copying into pages already mapped, and the copy is what stalls
// training.
//
// For a state with tensors on a CUDA device the arena's memory is
// page-locked (registered with the driver) the first time, so the device
// copies into it run at full speed; it stays registered while it is reused.
//
// Thread-compatible, with no lock of its own: one thread at a time uses an
// arena (the manager's, under the manager's lock); StagingBytes and
// StageState are safe from any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <thread>
#include <vector>

#include "ckpt/state.h"
#include "ckpt/status.h"
#include "device/cuda_driver.h"

namespace ckpt {

class StagingArena {
 public:
  StagingArena() = default;
  ~StagingArena();
  StagingArena(const StagingArena&) = delete;
  StagingArena& operator=(const StagingArena&) = delete;

  // At least `bytes` bytes, reused from the last call when they fit (the
  // contents are not kept). IOError if the memory cannot be mapped. Stops
  // a PrepareInBackground in progress and takes its memory as it is.
  Result<std::span<std::byte>> Reserve(uint64_t bytes);
  // Reserve for a load, whose reads land in the memory (O_DIRECT: the
  // kernel faults in the pages each read pins). Memory mapped anew is
  // handed over at once in ordinary pages, while threads of the arena (up
  // to 4, one a core) fault it in ahead of the reads, front to back, a
  // piece each in turn (MADV_POPULATE_WRITE,
  // which leaves a page already there as it is, so the reads may land
  // meanwhile): on this path fresh huge pages cost several times ordinary
  // ones (docs/benchmarks.md). OfferForHugePages, once the load is done,
  // leaves them to the kernel to gather into huge pages.
  Result<std::span<std::byte>> ReserveForReads(uint64_t bytes);
  // After a load whose ReserveForReads mapped anew (else nothing): marks
  // the memory for the kernel's khugepaged to gather into huge pages in
  // its own time (MADV_HUGEPAGE), since a later asynchronous save writes
  // from it with O_DIRECT faster from huge pages; no thread of the arena
  // does it at once, as that slowed whatever came next (staging.cc).
  void OfferForHugePages();
  // Unmaps the memory (after stopping the arena's thread) where it is over
  // `bytes` (0: no bound): a load that needed more staging memory than
  // Options::async_staging_bytes allows keeps none of it. Page-locked
  // memory stays: the bound does not apply to device states (docs/gpu.md),
  // and pinning it again would cost every later device load.
  void KeepAtMost(uint64_t bytes);

  // Maps `bytes` and touches every page on a thread of its own, so that the
  // first Reserve of up to that many bytes copies into memory already
  // faulted in: touching fresh pages (the kernel zeroing each one) costs
  // several times the copy, and the first asynchronous save's stall would
  // pay it on the caller's thread. The pages are ordinary ones, gathered
  // into huge pages afterwards (staging.cc says why). A Reserve that comes
  // before the thread is done stops it and takes the memory as it is (the
  // copy faults in the rest) rather than waiting. Memory that cannot be mapped
  // is left to Reserve, which then reports it. Called once, before any Reserve.
  void PrepareInBackground(uint64_t bytes);
  // Bytes PrepareInBackground has faulted in so far (from the start).
  uint64_t PreparedBytes() const;
  uint64_t capacity() const { return capacity_; }
  // The bytes the next Reserve gets without mapping anew: the capacity, or
  // what PrepareInBackground maps (faulted in or not yet).
  uint64_t available() const {
    return std::max(capacity_, preparing_.joinable() ? prepared_capacity_ : 0);
  }

  // Page-locks the memory Reserve gave (cuMemHostRegister through
  // `device`'s context) unless it is already: pinning touches every page,
  // so it is done once, not per save. Memory Reserve maps anew is
  // unregistered. A refusal is an error naming `what`: staging memory that
  // silently stayed pageable would make every device save slow.
  Status Register(const CudaDriver& cuda, int device, std::string_view what);
  bool registered() const { return registered_by_ != nullptr; }

 private:
  // Undoes Register, if it was done; before the memory is unmapped.
  void Unregister();
  // Stops and joins the arena's thread (PrepareInBackground's, or the
  // faulting or collapsing one) and adopts what PrepareInBackground mapped.
  void TakePrepared();
  // Replaces the memory with `bytes` mapped anew; `huge`: asks for huge
  // pages.
  Status MapAnew(uint64_t bytes, bool huge);
  // Undoes Register and unmaps the memory, if any.
  void Unmap();

  std::byte* data_ = nullptr;
  uint64_t capacity_ = 0;
  // The driver that registered the memory, and through which device.
  const CudaDriver* registered_by_ = nullptr;
  int registered_device_ = -1;
  // PrepareInBackground's thread and what it maps (null if it could not);
  // the thread alone touches them until TakePrepared joins it.
  std::thread preparing_;
  std::byte* prepared_ = nullptr;
  uint64_t prepared_capacity_ = 0;
  std::atomic<bool> stop_preparing_{false};
  std::atomic<uint64_t> prepared_bytes_{0};
  // ReserveForReads mapped the memory anew, in ordinary pages, not yet
  // offered for huge pages.
  bool offer_pending_ = false;
};

// Faults in new memory that reads are about to land in, on threads of its
// own (up to 4, one a core) ahead of the reads, front to back, from
// construction until done or destroyed (which stops and joins them):
// otherwise the reading threads fault each page as they land, one 4 KiB
// page at a time, about 0.4 s a GiB on one core (docs/benchmarks.md). Only
// spans of 8 MiB in all or more, and only those whose first page is not
// there yet (memory the caller has used is left alone); only the spans'
// page-aligned interiors, and a page already there stays as it is
// (MADV_POPULATE_WRITE), so reads may land at once.
class FaultAhead {
 public:
  explicit FaultAhead(const std::vector<std::span<std::byte>>& spans);
  ~FaultAhead();
  FaultAhead(const FaultAhead&) = delete;
  FaultAhead& operator=(const FaultAhead&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Bytes of staging memory a copy of `state` needs.
uint64_t StagingBytes(const State& state);

// The memory the machine can give without swapping (MemAvailable in
// /proc/meminfo), in bytes; 0 where it cannot be read.
uint64_t FreeMemory();

// Fills `out` (empty) with a copy of every entry of `state`, its tensor and
// blob bytes placed in `memory` (at least StagingBytes(state) bytes): host
// bytes copied on every core (ParallelCopy), device tensors by the CUDA
// driver (device_copy.h). `out` borrows `memory`, and all its entries are
// on the host.
Status StageState(const State& state, std::span<std::byte> memory, State& out);

}  // namespace ckpt
