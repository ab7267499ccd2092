#include "data/reader.h"

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

// A stretch of one stored chunk that lands in the target box: `take`
// bytes from `in_chunk` bytes into the chunk, to `dst` bytes into the box.
// take == chunk->length: the whole chunk.
struct Stretch {
  const format::ChunkRecord* chunk;
  uint64_t in_chunk;
  uint64_t take;
  uint64_t dst;
};

// Calls `visit` for each stretch of each chunk of `entry` that lands in
// the box (`offsets`, `lengths`), walking each piece's chunks (which cover
// its bytes in order) alongside the runs of the intersection; DataLoss if a
// piece's chunks end before the piece does, or `visit`'s first error.
Status WalkBox(const format::EntryRecord& entry,
               const std::vector<int64_t>& offsets,
               const std::vector<int64_t>& lengths,
               const std::function<Status(const Stretch&)>& visit) {
  const size_t elem = DTypeSize(entry.dtype);
  for (const format::PieceRecord& piece : entry.pieces) {
    const std::vector<Run> runs =
        IntersectionRuns(piece.offsets, piece.lengths, offsets, lengths, elem);
    size_t k = 0;
    uint64_t chunk_start = 0;
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
        const uint64_t take = std::min(end, chunk_start + c.length) - pos;
        CKPT_RETURN_IF_ERROR(
            visit({&c, pos - chunk_start, take, run.dst + (pos - run.src)}));
        pos += take;
      }
    }
  }
  return Status();
}

// "read <object> bytes [a, b) of entry "<name>"": where a chunk's error
// happened.
std::string ChunkWhere(const format::Manifest& manifest,
                       const format::EntryRecord& entry,
                       const format::ChunkRecord& chunk) {
  return "read " + manifest.objects[chunk.object].key + " bytes [" +
         std::to_string(chunk.offset) + ", " +
         std::to_string(chunk.StoredEnd()) + ") of entry " + Quote(entry.name);
}

Status CheckChunk(const format::Manifest& manifest,
                  const format::EntryRecord& entry,
                  const format::ChunkRecord& chunk,
                  std::span<const std::byte> bytes) {
  if (Xxh3_128(bytes) != chunk.checksum) {
    return ChecksumMismatch(manifest, entry, chunk);
  }
  return Status();
}

}  // namespace

Status UnpackChunk(const format::Manifest& manifest,
                   const format::EntryRecord& entry,
                   const format::ChunkRecord& chunk,
                   std::span<const std::byte> stored, std::span<std::byte> dest,
                   Checksums checks) {
  if (!chunk.compressed()) {
    if (dest.data() != stored.data()) {
      std::memcpy(dest.data(), stored.data(), dest.size());
    }
    if (checks == Checksums::kChecked) return Status();
    return CheckChunk(manifest, entry, chunk, dest);
  }
  // The stored bytes first, so that damage is named as damage, not as
  // whatever the decoder makes of it; then the bytes the load hands over.
  if (checks == Checksums::kCheck && Xxh3_64(stored) != chunk.stored_checksum) {
    return ChecksumMismatch(manifest, entry, chunk);
  }
  const Status unpacked = codec::Decompress(chunk.codec(), stored, dest);
  if (!unpacked.ok()) {
    return DataLossError(ChunkWhere(manifest, entry, chunk) +
                         ": does not decompress (" +
                         std::string(codec::CodecName(chunk.codec())) +
                         "): " + unpacked.message());
  }
  if (checks == Checksums::kChecked) return Status();
  if (Xxh3_128(std::span<const std::byte>(dest)) != chunk.checksum) {
    return DataLossError(ChunkWhere(manifest, entry, chunk) +
                         ": checksum mismatch after decompressing (the data "
                         "is damaged)");
  }
  return Status();
}

namespace {

// Whole chunks are read a span of their object at a time: a state of many
// small tensors (an optimizer's per-parameter state) lies back to back in
// one data object, and a read per chunk costs an open, two stats and a close
// on a file root (a GET on S3) — for 4 KiB chunks, several times the bytes
// themselves. A span that is not contiguous on both sides goes through a
// bounce buffer of at most kSpanBytes (plus a chunk) per reading thread.
constexpr uint64_t kSmallChunk = uint64_t{256} << 10;  // small entries' cap
constexpr uint64_t kSpanBytes = uint64_t{8} << 20;     // one read at most
// Gaps up to this are read and dropped: cheaper than another read (in an
// incremental chain they are the old bytes of rows a later step changed).
constexpr uint64_t kSpanGap = uint64_t{16} << 10;

// A whole chunk read in place.
using WholeChunk = ChunkRead;

// Appends the chunks of `r` to `out` when `r` is a whole entry of one piece
// whose chunks are all small; false (nothing appended) otherwise.
bool AddSmallChunks(const BoxRead& r, std::vector<WholeChunk>& out) {
  const format::EntryRecord& e = *r.entry;
  if (e.pieces.size() != 1 || r.lengths != e.shape ||
      e.pieces[0].lengths != e.shape ||
      std::any_of(r.offsets.begin(), r.offsets.end(),
                  [](int64_t o) { return o != 0; })) {
    return false;
  }
  uint64_t total = 0;
  for (const format::ChunkRecord& c : e.pieces[0].chunks) {
    if (c.length > kSmallChunk) return false;
    total += c.length;
  }
  if (total != r.dest.size()) return false;  // ReadBox reports it
  uint64_t at = 0;
  for (const format::ChunkRecord& c : e.pieces[0].chunks) {
    out.push_back({&e, &c, r.dest.data() + at});
    at += c.length;
  }
  return true;
}

// Checks the chunks [begin, end) of a span read straight into place as
// their bytes arrive (Storage::ReadRangeFilling hands them over in order):
// a chunk that arrives whole is hashed at once, one that arrives in pieces
// through a streaming hasher.
class FilledChecker {
 public:
  FilledChecker(const std::vector<WholeChunk>& chunks, size_t begin, size_t end)
      : chunks_(chunks), next_(begin), end_(end), bad_(end) {}

  void Filled(std::span<const std::byte> bytes) {
    while (!bytes.empty() && next_ < end_) {
      const format::ChunkRecord& c = *chunks_[next_].chunk;
      const uint64_t take = std::min<uint64_t>(c.length - have_, bytes.size());
      if (have_ == 0 && take == c.length) {
        Done(Xxh3_128(bytes.first(take)));
      } else {
        if (have_ == 0) hasher_.Reset();
        hasher_.Update(bytes.first(take));
        have_ += take;
        if (have_ == c.length) Done(hasher_.Digest());
      }
      bytes = bytes.subspan(take);
    }
  }

  // After a read that succeeded: the first chunk whose bytes do not match
  // its checksum, or `end`. Chunks not yet checked (of no bytes, or where
  // the storage handed over less than it read) are checked in place.
  size_t Finish() {
    for (; next_ < end_ && bad_ == end_; ++next_) {
      const WholeChunk& c = chunks_[next_];
      if (Xxh3_128({c.dest, c.chunk->length}) != c.chunk->checksum) {
        bad_ = next_;
      }
    }
    return bad_;
  }

 private:
  void Done(const Checksum128& sum) {
    if (sum != chunks_[next_].chunk->checksum && bad_ == end_) bad_ = next_;
    have_ = 0;
    ++next_;
  }

  const std::vector<WholeChunk>& chunks_;
  size_t next_;
  const size_t end_;
  size_t bad_;
  uint64_t have_ = 0;  // bytes of chunk `next_` hashed so far
  Xxh3Hasher hasher_;
};

// Reads chunks [begin, end) of `chunks` (one object, sorted by offset) with
// one range read, then moves each into place and checks it. If the span
// cannot be read as one, each chunk is read on its own, so that the error
// names the entry and the range as a single read's would.
Status ReadSpan(Storage& storage, const format::Manifest& manifest,
                const std::vector<WholeChunk>& chunks, size_t begin, size_t end,
                Checksums checks) {
  const uint32_t object = chunks[begin].chunk->object;
  const std::string& key = manifest.objects[object].key;
  const uint64_t start = chunks[begin].chunk->offset;
  uint64_t stop = start;
  bool compressed = false;
  for (size_t i = begin; i < end; ++i) {
    stop = std::max(stop, chunks[i].chunk->StoredEnd());
    compressed |= chunks[i].chunk->compressed();
  }
  // Chunks back to back in the object whose destinations are back to back
  // too (the views of one flat buffer, in the object's order) are read
  // straight in, and each is checked as its bytes arrive, while they are
  // still in the cache.
  // Compressed chunks go through the bounce buffer and are decompressed
  // into place from there.
  bool direct = !compressed;
  for (size_t i = begin + 1; direct && i < end; ++i) {
    const WholeChunk& a = chunks[i - 1];
    direct = chunks[i].chunk->offset == a.chunk->offset + a.chunk->length &&
             chunks[i].dest == a.dest + a.chunk->length;
  }
  if (direct && checks == Checksums::kChecked) {
    if (storage.ReadRange(key, start, {chunks[begin].dest, stop - start})
            .ok()) {
      return Status();
    }
  } else if (direct) {
    FilledChecker check(chunks, begin, end);
    const Status read = storage.ReadRangeFilling(
        key, start, {chunks[begin].dest, stop - start},
        [&](std::span<const std::byte> bytes) { check.Filled(bytes); });
    if (read.ok()) {
      const size_t bad = check.Finish();
      if (bad == end) return Status();
      return ChecksumMismatch(manifest, *chunks[bad].entry, *chunks[bad].chunk);
    }
  } else {
    auto bounce = std::make_unique_for_overwrite<std::byte[]>(stop - start);
    if (storage.ReadRange(key, start, {bounce.get(), stop - start}).ok()) {
      for (size_t i = begin; i < end; ++i) {
        const WholeChunk& c = chunks[i];
        CKPT_RETURN_IF_ERROR(UnpackChunk(
            manifest, *c.entry, *c.chunk,
            {bounce.get() + (c.chunk->offset - start), c.chunk->StoredLength()},
            {c.dest, c.chunk->length}, checks));
      }
      return Status();
    }
  }
  for (size_t i = begin; i < end; ++i) {
    const WholeChunk& c = chunks[i];
    CKPT_RETURN_IF_ERROR(ReadChunk(storage, manifest, *c.entry, *c.chunk,
                                   {c.dest, c.chunk->length}, checks));
  }
  return Status();
}

// Sorts `chunks` by object and offset and cuts them into spans [begin, end)
// of one object each, at most kSpanBytes (or one chunk), bridging gaps of at
// most kSpanGap.
std::vector<std::pair<size_t, size_t>> Spans(std::vector<WholeChunk>& chunks,
                                             uint64_t max_gap = kSpanGap) {
  std::sort(chunks.begin(), chunks.end(), [](const auto& a, const auto& b) {
    return std::pair(a.chunk->object, a.chunk->offset) <
           std::pair(b.chunk->object, b.chunk->offset);
  });
  std::vector<std::pair<size_t, size_t>> spans;
  uint64_t span_start = 0, span_stop = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const format::ChunkRecord& c = *chunks[i].chunk;
    const uint64_t stop = std::max(span_stop, c.StoredEnd());
    if (i == 0 || c.object != chunks[i - 1].chunk->object ||
        c.offset > span_stop + max_gap || stop - span_start > kSpanBytes) {
      spans.emplace_back(i, i + 1);
      span_start = c.offset;
      span_stop = c.StoredEnd();
      continue;
    }
    spans.back().second = i + 1;
    span_stop = stop;
  }
  return spans;
}

// Reads `chunks` a span at a time, one span after another.
Status ReadSpans(Storage& storage, const format::Manifest& manifest,
                 std::vector<WholeChunk>& chunks, Checksums checks) {
  for (const auto& [begin, end] : Spans(chunks)) {
    CKPT_RETURN_IF_ERROR(
        ReadSpan(storage, manifest, chunks, begin, end, checks));
  }
  return Status();
}

}  // namespace

Status ChecksumMismatch(const format::Manifest& manifest,
                        const format::EntryRecord& entry,
                        const format::ChunkRecord& chunk) {
  return DataLossError(ChunkWhere(manifest, entry, chunk) +
                       ": checksum mismatch (the data is damaged)");
}

Status ForEachChunkMeeting(
    const format::EntryRecord& entry, const std::vector<int64_t>& offsets,
    const std::vector<int64_t>& lengths,
    const std::function<void(const format::ChunkRecord&)>& visit) {
  const format::ChunkRecord* last = nullptr;  // the chunk visited last
  return WalkBox(entry, offsets, lengths, [&](const Stretch& s) {
    if (s.chunk != last) visit(*s.chunk);
    last = s.chunk;
    return Status();
  });
}

Status ReadChunk(Storage& storage, const format::Manifest& manifest,
                 const format::EntryRecord& entry,
                 const format::ChunkRecord& chunk, std::span<std::byte> dest,
                 Checksums checks) {
  const std::string& key = manifest.objects[chunk.object].key;
  if (chunk.compressed()) {
    // A compressed chunk is smaller than its bytes (the manifest's rules),
    // so this is at most `dest`'s size.
    auto stored =
        std::make_unique_for_overwrite<std::byte[]>(chunk.stored_length());
    const std::span<std::byte> in(stored.get(), chunk.stored_length());
    CKPT_RETURN_IF_ERROR_CTX(storage.ReadRange(key, chunk.offset, in),
                             ChunkWhere(manifest, entry, chunk));
    return UnpackChunk(manifest, entry, chunk, in, dest, checks);
  }
  CKPT_RETURN_IF_ERROR_CTX(storage.ReadRange(key, chunk.offset, dest),
                           ChunkWhere(manifest, entry, chunk));
  if (checks == Checksums::kChecked) return Status();
  return CheckChunk(manifest, entry, chunk, dest);
}

Status ReadBox(Storage& storage, const format::Manifest& manifest,
               const format::EntryRecord& entry,
               const std::vector<int64_t>& offsets,
               const std::vector<int64_t>& lengths, std::span<std::byte> dest,
               ReadStats* stats, Checksums checks) {
  std::unique_ptr<std::byte[]> staging;
  uint64_t staging_size = 0;
  // Whole chunks wanted in place: read at the end a span of their object
  // at a time (ReadSpans), so that a box of small chunks, or of an
  // incremental chain's chunks from several objects, is a few reads.
  std::vector<WholeChunk> whole;
  const format::ChunkRecord* staged = nullptr;  // the chunk in `staging`
  CKPT_RETURN_IF_ERROR(WalkBox(entry, offsets, lengths, [&](const Stretch& s) {
    const format::ChunkRecord& c = *s.chunk;
    std::byte* out = dest.data() + s.dst;
    if (s.take == c.length) {
      whole.push_back({&entry, &c, out});
      if (stats) {
        ++stats->chunks_read;
        stats->bytes_read += c.StoredLength();
      }
      return Status();
    }
    if (staged != &c) {
      if (staging_size < c.length) {
        staging = std::make_unique_for_overwrite<std::byte[]>(c.length);
        staging_size = c.length;
      }
      CKPT_RETURN_IF_ERROR(
          ReadChunk(storage, manifest, entry, c,
                    std::span<std::byte>(staging.get(), c.length), checks));
      if (stats) {
        ++stats->chunks_read;
        stats->bytes_read += c.StoredLength();
      }
      staged = &c;
    }
    std::memcpy(out, staging.get() + s.in_chunk, s.take);
    return Status();
  }));
  return ReadSpans(storage, manifest, whole, checks);
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
                 const std::vector<BoxRead>& reads, ThreadPool* pool,
                 Checksums checks) {
  std::vector<WholeChunk> small;
  std::vector<const BoxRead*> boxes;
  for (const BoxRead& r : reads) {
    if (!AddSmallChunks(r, small)) boxes.push_back(&r);
  }
  const std::vector<std::pair<size_t, size_t>> spans = Spans(small);
  const int parallelism = pool == nullptr ? 1 : pool->size() + 1;
  return ParallelFor(
      pool, parallelism, spans.size() + boxes.size(), [&](size_t i) {
        if (i < spans.size()) {
          return ReadSpan(storage, manifest, small, spans[i].first,
                          spans[i].second, checks);
        }
        const BoxRead& r = *boxes[i - spans.size()];
        return ReadBox(storage, manifest, *r.entry, r.offsets, r.lengths,
                       r.dest, nullptr, checks);
      });
}

Status ReadChunks(Storage& storage, const format::Manifest& manifest,
                  std::vector<ChunkRead> chunks, ThreadPool* pool,
                  uint64_t max_gap, Checksums checks) {
  const std::vector<std::pair<size_t, size_t>> spans = Spans(chunks, max_gap);
  const int parallelism = pool == nullptr ? 1 : pool->size() + 1;
  return ParallelFor(pool, parallelism, spans.size(), [&](size_t i) {
    return ReadSpan(storage, manifest, chunks, spans[i].first, spans[i].second,
                    checks);
  });
}

}  // namespace ckpt
