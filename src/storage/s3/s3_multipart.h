// Multipart uploads (s3_multipart.cc): how an s3:// object too large for one
// PUT, and every streamed write that outgrows one part, reaches the store.
// Internal to the backend.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "ckpt/storage.h"
#include "storage/s3/s3_root.h"

namespace ckpt::s3 {

// A streamed write of `key` (already checked). It buffers one part, ships
// each full part as it fills (max_concurrency in flight, their buffers
// reused), and on Close sends what is left: as a single PUT if no part was
// ever shipped, else as the last part before completing the upload.
std::unique_ptr<WritableObject> NewS3Writable(std::shared_ptr<Root> root,
                                              std::string key);

// Uploads `data` to the object `full` in parts of at least part_size,
// max_concurrency at once; `conditional`: the completion carries
// If-None-Match: * (AlreadyExists if the object exists). `where` prefixes
// errors.
Status PutMultipart(Root& root, const std::string& where,
                    const std::string& full, std::span<const std::byte> data,
                    bool conditional);

}  // namespace ckpt::s3
