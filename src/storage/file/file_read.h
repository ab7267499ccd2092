// Reads from a file:// root (file_read.cc). Internal to the backend.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "ckpt/status.h"
#include "ckpt/storage.h"
#include "storage/file/file_root.h"

namespace ckpt::file {

// Storage::ReadRange: exactly out.size() bytes of `key` from `offset`; with
// `filled`, Storage::ReadRangeFilling.
Status ReadObjectRange(const Root& root, std::string_view key, uint64_t offset,
                       std::span<std::byte> out,
                       const Storage::FilledFn* filled = nullptr);

// Storage::ReadAll. One open file, so a concurrent overwrite cannot change
// the size between the stat and the read (the default ReadAll opens the
// object twice).
Result<std::string> ReadObject(const Root& root, std::string_view key);

// Storage::ViewObject: the object's pages, mapped read-only.
Result<std::shared_ptr<const ObjectView>> ViewObject(const Root& root,
                                                     std::string_view key);

}  // namespace ckpt::file
