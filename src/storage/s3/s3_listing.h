// Listings of an s3:// root (s3_listing.cc): its objects, and the incomplete
// multipart uploads its dead writes may have left. Internal to the backend.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/storage.h"
#include "storage/s3/s3_root.h"

namespace ckpt::s3 {

// Storage::List: every object under `prefix`, sorted by key.
Result<std::vector<ObjectInfo>> ListObjects(Root& root,
                                            std::string_view prefix);

// Storage::AbortIncompleteWrites: aborts the incomplete uploads under
// `prefix` that `dead` picks; returns their keys.
Result<std::vector<std::string>> AbortIncompleteUploads(
    Root& root, std::string_view prefix,
    const std::function<bool(const ObjectInfo&)>& dead);

}  // namespace ckpt::s3
