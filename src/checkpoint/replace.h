// Whether a save may replace a step that is committed already
// (replace.cc): one that does not load whole is replaced by the next save
// of its number, one that loads whole never is.
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/root_context.h"

namespace ckpt {

class StepJudge {
 public:
  explicit StepJudge(RootContext& root) : root_(root) {}

  // Save step 1 on the coordinator, for `step`, committed already with the
  // manifest object `manifest`: a decision that replaces it (replace, with
  // why it does not load whole), or a failed one: AlreadyExists when it
  // loads whole or this manager may not replace it, another error when
  // that cannot be told (the storage failed).
  SaveDecision Decide(int64_t step, const ObjectInfo& manifest);

  // Keeps what this manager found of `step` while its manifest object is
  // `manifest`: `damage` is why it does not load whole (empty: it does).
  void Note(int64_t step, const ObjectInfo& manifest, std::string damage);

 private:
  // Empty when `step` loads whole, else why not: what this manager found
  // before for the same manifest object, or what a verify (every chunk
  // read and checked) finds now.
  Result<std::string> Damage(int64_t step, const ObjectInfo& manifest);
  // What Note kept for `step` as `manifest`, or null.
  const RootContext::StepVerdict* Known(int64_t step,
                                        const ObjectInfo& manifest) const;

  RootContext& root_;
};

}  // namespace ckpt
