// Listing a file:// root (file_list.cc). Internal to the backend.
#pragma once

#include <string_view>
#include <vector>

#include "ckpt/storage.h"
#include "storage/file/file_root.h"

namespace ckpt::file {

// Storage::List: every object whose key starts with `prefix`, sorted by key.
Result<std::vector<ObjectInfo>> ListObjects(const Root& root,
                                            std::string_view prefix);

}  // namespace ckpt::file
