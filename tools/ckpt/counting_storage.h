// A storage that counts the bytes moved through it, so that a command can
// draw a progress bar over a manager operation that reports no progress of
// its own (Save for `ckpt import`, LoadAll for `ckpt export`, Delete for
// `ckpt delete --force`, GarbageCollect for `ckpt gc`).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "ckpt/storage.h"

namespace ckpt::cli {

struct ByteCounts {
  uint64_t read = 0;     // by ReadRange
  uint64_t written = 0;  // appended to streamed objects
  // Of the objects deleted, by the size the last List or Stat through this
  // storage gave them (the manager lists what it deletes first).
  uint64_t deleted = 0;
};

// The counts so far. Called after each such read, append or delete, from
// whichever thread made it, never from two threads at once.
using ByteProgressFn = std::function<void(const ByteCounts&)>;

// Forwards every call to `target`, reporting to `progress`.
std::unique_ptr<Storage> NewCountingStorage(std::unique_ptr<Storage> target,
                                            ByteProgressFn progress);

}  // namespace ckpt::cli
