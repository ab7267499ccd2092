// Verify (verify.cc).
#pragma once

#include <cstdint>

#include "checkpoint/root_context.h"

namespace ckpt {

class Verifier {
 public:
  explicit Verifier(RootContext& root) : root_(root) {}

  Result<VerifyReport> Verify(int64_t step, const ProgressFn& progress);

 private:
  RootContext& root_;
};

}  // namespace ckpt
