// `s3://bucket/prefix` — objects in any S3-compatible store (docs/s3.md).
//
// A key K of the root is the object "prefix/K" of the bucket. Every byte
// goes over HTTP(S) through libcurl, every request signed with SigV4 and
// retried on 5xx, 429 and connection failures (s3_client.h). Objects above
// a size are uploaded in parts, several at once; a streamed write holds a
// few part buffers and reuses them. Create-if-absent is `If-None-Match: *`
// where the store honours it (the backend then declares
// atomic_create_if_absent); elsewhere it is a HEAD and then a PUT, and the
// commit protocol knows from the declaration that this is not atomic.
//
// S3 is strongly consistent (read-after-write, list-after-write), so a
// reader sees an object as soon as its PUT (or its multipart completion)
// returned; until then nothing is visible under the key.
#pragma once

#include <memory>

#include "ckpt/storage.h"
#include "storage/s3/http.h"
#include "storage/s3/s3_client.h"

namespace ckpt {

// The factory the registry calls for "s3": options and the environment.
// With options.create unset the prefix must already hold an object (or, for
// a root without a prefix, the bucket must exist), so a mistyped root is
// NotFound rather than a new empty one.
Result<std::unique_ptr<Storage>> OpenS3Storage(const ParsedUrl& url,
                                               const StorageOptions& options);

// The same on a resolved config and a given transport (tests wrap the
// transport to inject failures or count requests).
Result<std::unique_ptr<Storage>> OpenS3Storage(
    s3::S3Config config, std::shared_ptr<s3::HttpTransport> transport,
    bool create);

}  // namespace ckpt
