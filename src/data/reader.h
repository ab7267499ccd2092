// Reads entries of a committed checkpoint, checking every chunk it reads
// against the manifest's checksum. A mismatch is DataLoss that names the
// object, the entry and the byte range.
//
// Reads are by box: a rank asks for the part of a tensor it now holds (any
// world size, any split), and only the chunks that intersect that box are
// read — a checksum covers a whole chunk, so the chunk is the unit of reading.
// Chunks that lie wholly inside what the caller wants are read a span of
// their object at a time (up to 8 MiB, across gaps of up to 16 KiB),
// straight into the caller's buffer where both sides are contiguous, else
// through a bounce buffer; a chunk that straddles the edge of the box passes
// through a staging buffer of one chunk.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "ckpt/storage.h"
#include "format/manifest.h"

namespace ckpt {

// Whether a read checks every chunk against its checksum (always, but for
// the second pass over bytes already checked in place: viewed_reads.h).
enum class Checksums { kCheck, kChecked };

struct ReadStats {
  uint64_t chunks_read = 0;
  uint64_t bytes_read = 0;  // from storage
};

// Reads the box (`offsets`, `lengths`) of tensor or blob entry `entry` into
// `dest`, which holds exactly the box in row-major order. The box must lie
// inside the entry's shape.
Status ReadBox(Storage& storage, const format::Manifest& manifest,
               const format::EntryRecord& entry,
               const std::vector<int64_t>& offsets,
               const std::vector<int64_t>& lengths, std::span<std::byte> dest,
               ReadStats* stats = nullptr,
               Checksums checks = Checksums::kCheck);

// The whole entry (ReadBox of its full shape).
Status ReadEntry(Storage& storage, const format::Manifest& manifest,
                 const format::EntryRecord& entry, std::span<std::byte> dest,
                 ReadStats* stats = nullptr);

// The DataLoss of a chunk whose bytes do not match its checksum, naming the
// object, the byte range and the entry.
Status ChecksumMismatch(const format::Manifest& manifest,
                        const format::EntryRecord& entry,
                        const format::ChunkRecord& chunk);

// Calls `visit` once for each chunk of `entry` that holds bytes of the box
// (`offsets`, `lengths`), in the order of its pieces; DataLoss if a piece's
// chunks end before the piece does.
Status ForEachChunkMeeting(
    const format::EntryRecord& entry, const std::vector<int64_t>& offsets,
    const std::vector<int64_t>& lengths,
    const std::function<void(const format::ChunkRecord&)>& visit);

// The bytes of `chunk` into `dest` (its length) from its `stored` bytes,
// already read: a compressed chunk's stored checksum checked (unless
// `checks` is kChecked), then decompressed and its bytes checked; a raw
// one copied (unless `stored` is `dest`) and checked. DataLoss naming the
// object, the byte range and the entry otherwise.
Status UnpackChunk(const format::Manifest& manifest,
                   const format::EntryRecord& entry,
                   const format::ChunkRecord& chunk,
                   std::span<const std::byte> stored, std::span<std::byte> dest,
                   Checksums checks = Checksums::kCheck);

// Reads one chunk into `dest` (its length) and checks its checksum.
Status ReadChunk(Storage& storage, const format::Manifest& manifest,
                 const format::EntryRecord& entry,
                 const format::ChunkRecord& chunk, std::span<std::byte> dest,
                 Checksums checks = Checksums::kCheck);

}  // namespace ckpt

namespace ckpt {

class ThreadPool;

// One box of one entry to read into `dest` (ReadBox's arguments).
struct BoxRead {
  const format::EntryRecord* entry = nullptr;
  std::vector<int64_t> offsets;
  std::vector<int64_t> lengths;
  std::span<std::byte> dest;
};

// Cuts `read` into slabs of about `slab_bytes` along dimension 0, so that one
// large tensor is read by several threads. The slabs' destinations are
// disjoint (the box is row-major).
std::vector<BoxRead> SplitBoxRead(BoxRead read, uint64_t slab_bytes);

// Reads every box, in parallel on `pool` (null: one at a time), each
// straight into its destination, checking every chunk. Whole entries of one
// piece in small chunks (up to 256 KiB) that lie near each other in an object
// are read with one range read of up to 8 MiB and copied into place, so that
// 10,000 small tensors cost a few reads, not 10,000. The first error (small
// entries' spans first, then the other boxes in the order given) is
// returned; other destinations may be partly written.
Status ReadBoxes(Storage& storage, const format::Manifest& manifest,
                 const std::vector<BoxRead>& reads, ThreadPool* pool,
                 Checksums checks = Checksums::kCheck);

// One whole chunk to read into `dest` (the chunk's length).
struct ChunkRead {
  const format::EntryRecord* entry;
  const format::ChunkRecord* chunk;
  std::byte* dest;
};

// Reads whole chunks, a span of their object at a time (as ReadBoxes reads
// small entries, but bridging gaps of at most `max_gap` bytes), in
// parallel on `pool`, checking every chunk; the first error is returned.
Status ReadChunks(Storage& storage, const format::Manifest& manifest,
                  std::vector<ChunkRead> chunks, ThreadPool* pool,
                  uint64_t max_gap, Checksums checks = Checksums::kCheck);

}  // namespace ckpt
