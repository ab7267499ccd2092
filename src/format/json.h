// Strict JSON parsing for everything ckpt reads from storage. nlohmann::json
// keeps the last of duplicate keys; a file with duplicate keys is ambiguous
// (two readers may see two different tensors), so it is rejected here.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "ckpt/status.h"

namespace ckpt::format {

// One step of the way from the root to a value: an element of an array, or
// the member of an object under `key`.
struct JsonStep {
  bool in_array = false;
  std::string_view key;
};

// Called on each object and array as it closes, with the steps that lead to
// it. Returning true says it took the value (moved it out); the tree keeps a
// discarded value in its place, which no JSON text can produce. A reader of a
// large document turns its many small objects into records this way instead
// of holding a tree several times the text's size.
using JsonFold =
    std::function<bool(std::span<const JsonStep> path, nlohmann::json& value)>;

// Parses `text` in one pass, in time linear in its size; a syntax error or a
// duplicate key in any object is DataLoss with `what` (the file or object
// name) in the message. Nesting deeper than 64 levels is refused.
Result<nlohmann::json> ParseJsonStrict(std::string_view text,
                                       std::string_view what,
                                       const JsonFold& fold = nullptr);

// Appends `s` to `out` as a JSON string, escaped as nlohmann::json's dump
// escapes it (bytes that are not UTF-8 replaced, so it never throws). Names
// are printable ASCII nearly always, which needs no escaping: that case
// costs no json value and no second string, which matters when a header or
// a description lists 10,000 of them.
void AppendJsonString(std::string& out, std::string_view s);

}  // namespace ckpt::format
