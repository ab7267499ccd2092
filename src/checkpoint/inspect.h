// Latest, List, Describe (inspect.cc).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/root_context.h"

namespace ckpt {

class Inspector {
 public:
  explicit Inspector(RootContext& root) : root_(root) {}

  Result<std::optional<int64_t>> Latest();
  // Every committed checkpoint, oldest first, each judged complete or not
  // (CheckpointInfo::incomplete) from one listing of the step objects.
  Result<std::vector<CheckpointInfo>> List();
  // The same without the judgement, so without that listing: for retention
  // and the catalog, which run after every save and do not need it.
  // The facts of the `listed` manifests that validate (the others skipped
  // with a warning); with `sizes`, each judged against them.
  std::vector<CheckpointInfo> Infos(
      const std::vector<std::pair<int64_t, ObjectInfo>>& listed,
      const std::map<std::string, uint64_t>* sizes);
  Result<CheckpointDescription> Describe(std::optional<int64_t> step);

 private:
  RootContext& root_;
};

}  // namespace ckpt
