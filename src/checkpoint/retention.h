// Which committed checkpoints a RetentionPolicy deletes. Pure: no storage.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "ckpt/checkpoint_manager.h"

namespace ckpt {

// `checkpoints` are committed checkpoints, any order. Returns the steps to
// delete, oldest first: those no rule keeps, never the newest, and never one
// that a kept checkpoint depends on (directly or through a chain).
std::vector<int64_t> StepsToDelete(
    const std::vector<CheckpointInfo>& checkpoints,
    const RetentionPolicy& policy);

}  // namespace ckpt
