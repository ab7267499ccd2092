// Staging memory for asynchronous saves: a copy of the caller's state that
// the background save writes from while the caller changes its tensors.
//
// The memory is allocated once and reused by every later save (grown only
// when a larger state comes): touching fresh pages costs far more than
// copying into pages already mapped, and the copy is what stalls training.
//
// Thread-compatible, with no lock of its own: one thread at a time uses an
// arena (the manager's, under the manager's lock); StagingBytes and
// StageState are safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "ckpt/state.h"
#include "ckpt/status.h"

namespace ckpt {

class StagingArena {
 public:
  StagingArena() = default;
  ~StagingArena();
  StagingArena(const StagingArena&) = delete;
  StagingArena& operator=(const StagingArena&) = delete;

  // At least `bytes` bytes, reused from the last call when they fit (the
  // contents are not kept). IOError if the memory cannot be mapped.
  Result<std::span<std::byte>> Reserve(uint64_t bytes);
  uint64_t capacity() const { return capacity_; }

 private:
  std::byte* data_ = nullptr;
  uint64_t capacity_ = 0;
};

// Bytes of staging memory a copy of `state` needs.
uint64_t StagingBytes(const State& state);

// Fills `out` (empty) with a copy of every entry of `state`, its tensor and
// blob bytes placed in `memory` (at least StagingBytes(state) bytes), copied
// on every core (ParallelCopy). `out` borrows `memory`.
Status StageState(const State& state, std::span<std::byte> memory, State& out);

}  // namespace ckpt
