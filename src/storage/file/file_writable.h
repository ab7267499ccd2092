// Durable writes to a file:// root (file_writable.cc): a streamed object
// (NewWritable) and a whole one (Put) share one writer, which writes a
// temporary file beside the object and publishes it whole. Internal to the
// backend.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
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

}  // namespace ckpt::file
