// The handle save_async returns: a ckpt::SaveHandle (CheckpointManager::
// SaveAsync has copied the state into the manager's staging memory by the
// time it exists, so the caller's arrays are free again).
#pragma once

#include <cstdint>

#include "ckpt/checkpoint_manager.h"

namespace ckpt::python {

class AsyncSave {
 public:
  explicit AsyncSave(SaveHandle handle) : handle_(std::move(handle)) {}

  // Blocks until the save has ended (without holding the GIL) and returns
  // its result, or throws StatusError; every call gives the same outcome.
  SaveResult Wait() const;
  bool Done() const { return handle_.Done(); }
  int64_t step() const { return handle_.step(); }

 private:
  SaveHandle handle_;
};

}  // namespace ckpt::python
