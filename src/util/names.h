// Validation of the names users and files give us: entry names and storage
// keys. Nothing named here may escape a root or smuggle path syntax.
#pragma once

#include <string>
#include <string_view>

#include "ckpt/status.h"

namespace ckpt {

// `s` in double quotes for an error message, control bytes and bytes that are
// not UTF-8 escaped as \xNN, and long names shortened, so a hostile name cannot
// garble a terminal or a log.
std::string Quote(std::string_view s);

// `s` as it is where it holds no control byte and is valid UTF-8 (an
// ordinary name prints as itself), else as Quote gives it: text a file
// supplies (a job id, a metric's name, metadata) printed to a terminal.
std::string Printable(std::string_view s);

// Longest entry name or storage key accepted.
inline constexpr size_t kMaxNameLength = 4096;

// An entry name: valid UTF-8, non-empty, at most kMaxNameLength bytes, no NUL
// or other
// control characters, no backslash, not absolute, and no empty, "." or ".."
// component between slashes. "__metadata__" is reserved by safetensors.
Status ValidateEntryName(std::string_view name);

// A storage key (relative to a root): the same rules as an entry name.
Status ValidateKey(std::string_view key);

}  // namespace ckpt
