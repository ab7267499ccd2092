#include "checkpoint/reader.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "util/checksum.h"
#include "util/names.h"
#include "util/thread_pool.h"

namespace ckpt {
namespace {

// A contiguous stretch of bytes to copy from a stored piece (at `src`, in
// the piece's own row-major bytes) to the destination box (at `dst`).
struct Run {
  uint64_t src = 0;
  uint64_t dst = 0;
  uint64_t len = 0;
};

// Row-major byte strides of a box of `lengths`.
std::vector<uint64_t> Strides(const std::vector<int64_t>& lengths,
                              size_t elem) {
  std::vector<uint64_t> s(lengths.size());
  uint64_t acc = elem;
  for (size_t d = lengths.size(); d-- > 0;) {
    s[d] = acc;
    acc *= static_cast<uint64_t>(lengths[d]);
  }
  return s;
}

// The runs that move the intersection of stored piece (po, pl) and target
// box (to, tl) into the target, in increasing source order, merged where
// both sides are contiguous. Empty if they do not intersect.
std::vector<Run> IntersectionRuns(const std::vector<int64_t>& po,
                                  const std::vector<int64_t>& pl,
                                  const std::vector<int64_t>& to,
                                  const std::vector<int64_t>& tl, size_t elem) {
  const size_t rank = po.size();
  std::vector<Run> runs;
  if (rank == 0) {
    runs.push_back({0, 0, elem});
    return runs;
  }
  std::vector<int64_t> lo(rank), hi(rank);
  for (size_t d = 0; d < rank; ++d) {
    lo[d] = std::max(po[d], to[d]);
    hi[d] = std::min(po[d] + pl[d], to[d] + tl[d]);
    if (lo[d] >= hi[d]) return runs;
  }
  const std::vector<uint64_t> ps = Strides(pl, elem), ts = Strides(tl, elem);
  const uint64_t len =
      static_cast<uint64_t>(hi[rank - 1] - lo[rank - 1]) * elem;
  std::vector<int64_t> idx(lo);  // odometer over all but the last dimension
  while (true) {
    uint64_t src = 0, dst = 0;
    for (size_t d = 0; d < rank; ++d) {
      src += static_cast<uint64_t>(idx[d] - po[d]) * ps[d];
      dst += static_cast<uint64_t>(idx[d] - to[d]) * ts[d];
    }
    if (!runs.empty() && runs.back().src + runs.back().len == src &&
        runs.back().dst + runs.back().len == dst) {
      runs.back().len += len;
    } else {
      runs.push_back({src, dst, len});
    }
    size_t d = rank - 1;
    while (d > 0) {
      --d;
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
      if (d == 0) return runs;
    }
    if (rank == 1) return runs;
  }
}

}  // namespace

Status ReadChunk(Storage& storage, const format::Manifest& manifest,
                 const format::EntryRecord& entry,
                 const format::ChunkRecord& chunk, std::span<std::byte> dest) {
  const std::string& key = manifest.objects[chunk.object].key;
  const std::string where = "read " + key + " bytes [" +
                            std::to_string(chunk.offset) + ", " +
                            std::to_string(chunk.offset + chunk.length) +
                            ") of entry " + Quote(entry.name);
  CKPT_RETURN_IF_ERROR_CTX(storage.ReadRange(key, chunk.offset, dest), where);
  if (Xxh3_128(dest) != chunk.checksum) {
    return DataLossError(where + ": checksum mismatch (the data is damaged)");
  }
  return Status();
}

Status ReadBox(Storage& storage, const format::Manifest& manifest,
               const format::EntryRecord& entry,
               const std::vector<int64_t>& offsets,
               const std::vector<int64_t>& lengths, std::span<std::byte> dest,
               ReadStats* stats) {
  const size_t elem = DTypeSize(entry.dtype);
  std::unique_ptr<std::byte[]> staging;
  uint64_t staging_size = 0;
  for (const format::PieceRecord& piece : entry.pieces) {
    const std::vector<Run> runs =
        IntersectionRuns(piece.offsets, piece.lengths, offsets, lengths, elem);
    if (runs.empty()) continue;
    // Chunks cover the piece's bytes in order; walk them alongside the runs.
    size_t k = 0;
    uint64_t chunk_start = 0;
    size_t staged = SIZE_MAX;  // the chunk now in `staging`
    for (const Run& run : runs) {
      uint64_t pos = run.src;
      const uint64_t end = run.src + run.len;
      while (pos < end) {
        while (k < piece.chunks.size() &&
               chunk_start + piece.chunks[k].length <= pos) {
          chunk_start += piece.chunks[k].length;
          ++k;
        }
        if (k == piece.chunks.size()) {
          return DataLossError("read entry " + Quote(entry.name) +
                               ": its chunks end before its piece does");
        }
        const format::ChunkRecord& c = piece.chunks[k];
        const uint64_t chunk_end = chunk_start + c.length;
        const uint64_t take = std::min(end, chunk_end) - pos;
        std::byte* out = dest.data() + run.dst + (pos - run.src);
        if (pos == chunk_start && chunk_end <= end) {
          // The whole chunk is wanted: read it in place.
          CKPT_RETURN_IF_ERROR(ReadChunk(storage, manifest, entry, c,
                                         std::span<std::byte>(out, c.length)));
          if (stats) {
            ++stats->chunks_read;
            stats->bytes_read += c.length;
          }
        } else {
          if (staged != k) {
            if (staging_size < c.length) {
              staging = std::make_unique_for_overwrite<std::byte[]>(c.length);
              staging_size = c.length;
            }
            CKPT_RETURN_IF_ERROR(
                ReadChunk(storage, manifest, entry, c,
                          std::span<std::byte>(staging.get(), c.length)));
            if (stats) {
              ++stats->chunks_read;
              stats->bytes_read += c.length;
            }
            staged = k;
          }
          std::memcpy(out, staging.get() + (pos - chunk_start), take);
        }
        pos += take;
      }
    }
  }
  return Status();
}

Status ReadEntry(Storage& storage, const format::Manifest& manifest,
                 const format::EntryRecord& entry, std::span<std::byte> dest,
                 ReadStats* stats) {
  return ReadBox(storage, manifest, entry,
                 std::vector<int64_t>(entry.shape.size(), 0), entry.shape, dest,
                 stats);
}

}  // namespace ckpt

namespace ckpt {

std::vector<BoxRead> SplitBoxRead(BoxRead read, uint64_t slab_bytes) {
  std::vector<BoxRead> out;
  if (read.lengths.empty() || read.lengths[0] <= 1 || slab_bytes == 0 ||
      read.dest.size() <= slab_bytes) {
    out.push_back(std::move(read));
    return out;
  }
  const int64_t rows = read.lengths[0];
  const uint64_t row_bytes = read.dest.size() / static_cast<uint64_t>(rows);
  const int64_t per_slab = static_cast<int64_t>(
      std::max<uint64_t>(1, slab_bytes / std::max<uint64_t>(row_bytes, 1)));
  for (int64_t r = 0; r < rows; r += per_slab) {
    BoxRead slab = read;
    const int64_t n = std::min(per_slab, rows - r);
    slab.offsets[0] += r;
    slab.lengths[0] = n;
    slab.dest = read.dest.subspan(static_cast<uint64_t>(r) * row_bytes,
                                  static_cast<uint64_t>(n) * row_bytes);
    out.push_back(std::move(slab));
  }
  return out;
}

Status ReadBoxes(Storage& storage, const format::Manifest& manifest,
                 const std::vector<BoxRead>& reads, ThreadPool* pool) {
  const int parallelism = pool == nullptr ? 1 : pool->size() + 1;
  return ParallelFor(pool, parallelism, reads.size(), [&](size_t i) {
    const BoxRead& r = reads[i];
    return ReadBox(storage, manifest, *r.entry, r.offsets, r.lengths, r.dest);
  });
}

}  // namespace ckpt
