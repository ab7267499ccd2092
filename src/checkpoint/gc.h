// Retention and dead attempts (gc.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "checkpoint/root_context.h"

namespace ckpt {

class Collector {
 public:
  explicit Collector(RootContext& root) : root_(root) {}

  // `keep`: a step retention must not delete now (with what it depends on):
  // the one a save just committed, which may lie below the newest.
  Result<GcReport> GarbageCollect(const GcOptions& gc,
                                  std::optional<int64_t> keep = std::nullopt);

 private:
  // Sets root_.known_steps to the steps of `infos` that `report` did not
  // delete, when each is whole by the listing (CheckpointInfo::incomplete
  // empty); leaves it unknown when one is not.
  void KnowSteps(const std::vector<CheckpointInfo>& infos,
                 const GcReport& report);

  RootContext& root_;
};

}  // namespace ckpt
