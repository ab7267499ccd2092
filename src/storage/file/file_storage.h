// `file:///path` — a directory on a POSIX file system.
//
// Durable writes follow docs/design.md: write to a unique temporary name in the
// same directory (O_EXCL), fsync it, rename it into place (or link(2) it for
// create-if-absent, so exactly one writer wins), fsync the directory; a new
// directory also fsyncs its parent. An fsync error fails the write and is
// never retried (the kernel may already have dropped the dirty pages).
//
// Every file is opened relative to the root's directory handle, one path
// component at a time with O_NOFOLLOW, so no key can leave the root: not by
// "..", not by an absolute path, not by a symlink planted inside the root.
// Temporary files are named "<name>.ckpt-tmp-<16 random hex digits>" and are
// listed like any object; TemporaryOf recognises them (and names the key each
// was written for), so garbage collection can remove those a crash left
// behind.
#pragma once

#include <memory>
#include <string_view>

#include "ckpt/storage.h"

namespace ckpt {

// Opens the directory `url.path`. With options.create a missing directory is
// created (with its parents); a root that exists but is not a directory is
// InvalidArgument.
Result<std::unique_ptr<Storage>> OpenFileStorage(const ParsedUrl& url,
                                                 const StorageOptions& options);

// Marker in the names of temporary files (Storage::TemporaryOf tells whether
// a key is one).
inline constexpr std::string_view kTempMarker = ".ckpt-tmp-";

}  // namespace ckpt
