// Which committed checkpoints a RetentionPolicy deletes. Pure: no storage.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "ckpt/checkpoint_manager.h"

namespace ckpt {

// `checkpoints` are committed checkpoints, any order. Returns the steps to
// delete, oldest first: those no rule keeps, never the newest, and never one
// that a kept checkpoint depends on (directly or through a chain). Nothing
// where keep_best ranks by a metric none of them has (RetentionRanks). A
// checkpoint marked incomplete (CheckpointInfo::incomplete) is neither
// counted nor deleted: the rules and "the newest" see only whole ones.
std::vector<int64_t> StepsToDelete(
    const std::vector<CheckpointInfo>& checkpoints,
    const RetentionPolicy& policy);

// FailedPrecondition where keep_best ranks by a metric that none of
// `checkpoints` (at least one) has, naming the metric and those they have:
// a misspelled metric would otherwise keep none of the best, and deleting
// is not undone. A metric some have (given only at evaluations) ranks those.
Status RetentionRanks(const std::vector<CheckpointInfo>& checkpoints,
                      const RetentionPolicy& policy);

}  // namespace ckpt
