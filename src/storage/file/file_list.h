// Listing a file:// root (file_list.cc). Internal to the backend.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/storage.h"
#include "storage/file/file_root.h"

namespace ckpt::file {

// Storage::List: every object whose key starts with `prefix`, sorted by key.
Result<std::vector<ObjectInfo>> ListObjects(const Root& root,
                                            std::string_view prefix);

// Storage::AbortIncompleteWrites: the empty folders at the root's top level
// whose names start with `prefix` (a write killed between making a step's
// folder and its first file leaves one, which List never shows), each
// offered to `dead` as "<name>/" with the folder's mtime; those it calls
// dead are removed (unless something came into them meanwhile), and their
// keys returned.
Result<std::vector<std::string>> RemoveEmptyFolders(
    const Root& root, std::string_view prefix,
    const std::function<bool(const ObjectInfo&)>& dead);

}  // namespace ckpt::file
