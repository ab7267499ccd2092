// Durable writes to a file:// root (file_writable.cc): a streamed object
// (NewWritable) and a whole one (Put) share one writer, which writes a
// temporary file beside the object and publishes it whole. Internal to the
// backend.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ckpt/storage.h"
#include "storage/file/file_root.h"

namespace ckpt::file {

// Storage::NewWritable: a streamed write of `key`, through O_DIRECT where
// the file system takes it.
Result<std::unique_ptr<WritableObject>> NewFileWritable(
    std::shared_ptr<const Root> root, std::string_view key);

// Storage::Put: writes `data` to a temporary file and publishes it as `mode`
// says.
Status PutFile(std::shared_ptr<const Root> root, std::string_view key,
               std::span<const std::byte> data, PutMode mode);

// Storage::TemporaryOf: if `key` has the name a writer gives its temp file
// (exactly NAME.ckpt-tmp-<16 lower-case hex digits>, NAME not empty), the
// key it was writing. A NAME longer than 229 bytes is cut to 229 in its temp
// file's name (to fit NAME_MAX), so for such a key the target is cut alike.
std::optional<std::string> TemporaryTarget(std::string_view key);

}  // namespace ckpt::file
