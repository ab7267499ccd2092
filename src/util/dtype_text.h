// How an error message names a tensor's type: "F32 [2, 3]". One spelling,
// so that a mismatch found while planning a save reads like one found while
// loading.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "ckpt/dtype.h"

namespace ckpt {

std::string DescribeTensorType(DType dtype, std::span<const int64_t> shape);

}  // namespace ckpt
