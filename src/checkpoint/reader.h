// Reads entries of a committed checkpoint, checking every chunk it reads
// against the manifest's checksum. A mismatch is DataLoss that names the
// object, the entry and the byte range.
#pragma once

#include <span>

#include "ckpt/storage.h"
#include "format/manifest.h"

namespace ckpt {

// Reads tensor or blob entry `entry` of `manifest` into `dest`, which holds
// the whole tensor in row-major order (exactly its byte size).
Status ReadEntry(Storage& storage, const format::Manifest& manifest,
                 const format::EntryRecord& entry, std::span<std::byte> dest);

// Reads one chunk into `dest` (its length) and checks its checksum.
Status ReadChunk(Storage& storage, const format::Manifest& manifest,
                 const format::EntryRecord& entry,
                 const format::ChunkRecord& chunk, std::span<std::byte> dest);

// Copies the box (`offsets`, `lengths`) of a row-major tensor of `shape` from
// `box_bytes` (the box's own row-major bytes) into `dest` (the whole tensor).
void CopyBoxInto(const std::vector<int64_t>& shape,
                 const std::vector<int64_t>& offsets,
                 const std::vector<int64_t>& lengths, size_t elem_size,
                 std::span<const std::byte> box_bytes,
                 std::span<std::byte> dest);

}  // namespace ckpt
