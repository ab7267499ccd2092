// Strict JSON parsing for everything ckpt reads from storage. nlohmann::json
// keeps the last of duplicate keys; a file with duplicate keys is ambiguous
// (two readers may see two different tensors), so it is rejected here.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "ckpt/status.h"

namespace ckpt::format {

// Parses `text`; a syntax error or a duplicate key in any object is DataLoss
// with `what` (the file or object name) in the message. Nesting deeper than
// 64 levels is refused.
Result<nlohmann::json> ParseJsonStrict(std::string_view text,
                                       std::string_view what);

}  // namespace ckpt::format
