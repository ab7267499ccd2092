// A storage that counts the bytes moved through it, so that a command can
// draw a progress bar over a manager operation that reports no progress of
// its own (Save for `ckpt import`, LoadAll for `ckpt export`).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "ckpt/storage.h"

namespace ckpt::cli {

// The bytes read (ReadRange) and written (appended to streamed objects) so
// far. Called after each such read or append, from whichever thread made it,
// never from two threads at once.
using ByteProgressFn = std::function<void(uint64_t read, uint64_t written)>;

// Forwards every call to `target`, reporting to `progress`.
std::unique_ptr<Storage> NewCountingStorage(std::unique_ptr<Storage> target,
                                            ByteProgressFn progress);

}  // namespace ckpt::cli
