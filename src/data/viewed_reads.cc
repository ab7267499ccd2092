#include "data/viewed_reads.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "util/checksum.h"
#include "util/names.h"
#include "util/thread_pool.h"

namespace ckpt {
namespace {

// Copies are handed to a ReadRangeFilling caller this many bytes at a
// time, so that it checksums them while they are still in the cache.
constexpr size_t kFilledPiece = size_t{256} << 10;
// Chunks of at least this many bytes are prefetched.
constexpr uint64_t kPrefetchMin = uint64_t{1} << 20;

struct ChunkToCheck {
  const format::EntryRecord* entry;
  const format::ChunkRecord* chunk;
};

}  // namespace

double ResidentFraction(Storage& from, const format::Manifest& m,
                        const std::vector<BoxRead>& boxes) {
  // Each chunk once, by object; then the chunks that lie back to back in
  // their object are looked at with one mincore: a state of 4 KiB chunks
  // has half a million of them a GiB, and a call and a set entry each took
  // a quarter of the load's time.
  std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>> chunks;
  for (const BoxRead& b : boxes) {
    // A box whose chunks do not add up fails the read that follows.
    (void)ForEachChunkMeeting(
        *b.entry, b.offsets, b.lengths, [&](const format::ChunkRecord& c) {
          chunks.push_back({c.object, {c.offset, c.StoredLength()}});
        });
  }
  std::sort(chunks.begin(), chunks.end());
  chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  uint64_t total = 0, resident = 0;
  std::vector<unsigned char> pages;
  std::shared_ptr<const ObjectView> view;
  uint32_t viewed = UINT32_MAX;  // the object `view` is of
  for (size_t i = 0; i < chunks.size();) {
    // A run of chunks of one object, each starting where the last ends.
    const uint32_t object = chunks[i].first;
    const uint64_t offset = chunks[i].second.first;
    uint64_t length = chunks[i].second.second;
    for (++i; i < chunks.size() && chunks[i].first == object &&
              chunks[i].second.first == offset + length;
         ++i) {
      length += chunks[i].second.second;
    }
    total += length;
    if (object != viewed) {
      viewed = object;
      view = nullptr;
      if (object < m.objects.size()) {
        Result<std::shared_ptr<const ObjectView>> v =
            from.ViewObject(m.objects[object].key);
        if (v.ok()) view = *v;
      }
    }
    if (view == nullptr) continue;
    const std::span<const std::byte> bytes = view->bytes();
    if (length == 0 || offset >= bytes.size()) continue;
    const uint64_t n = std::min<uint64_t>(length, bytes.size() - offset);
    const uintptr_t begin = reinterpret_cast<uintptr_t>(bytes.data()) + offset;
    const uintptr_t first = begin / page * page;
    const uintptr_t end = (begin + n + page - 1) / page * page;
    pages.assign((end - first) / page, 0);
    if (::mincore(reinterpret_cast<void*>(first), end - first, pages.data()) !=
        0) {
      // A range mincore cannot look at (not all mapped): count it as in
      // memory, as a storage's own buffers are.
      resident += n;
      continue;
    }
    const uint64_t in = static_cast<uint64_t>(
        std::count_if(pages.begin(), pages.end(),
                      [](unsigned char p) { return (p & 1) != 0; }));
    resident += std::min<uint64_t>(n, in * page);
  }
  return total == 0
             ? 1.0
             : static_cast<double>(resident) / static_cast<double>(total);
}

Result<std::shared_ptr<const ObjectView>> ViewedReads::Get(
    std::string_view key) {
  {
    MutexLock lock(&mu_);
    auto it = views_.find(key);
    if (it != views_.end()) return it->second;
  }
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const ObjectView> view,
                        target()->ViewObject(key));
  if (view == nullptr) {
    return FailedPreconditionError("view " + Quote(key) + " in " + url() +
                                   ": this storage offers no views");
  }
  MutexLock lock(&mu_);
  return views_.emplace(std::string(key), std::move(view)).first->second;
}

Status ViewedReads::ReadRange(std::string_view key, uint64_t offset,
                              std::span<std::byte> out) {
  return ReadRangeFilling(key, offset, out, nullptr);
}

Status ViewedReads::ReadRangeFilling(std::string_view key, uint64_t offset,
                                     std::span<std::byte> out,
                                     const FilledFn& filled) {
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const ObjectView> view, Get(key));
  const std::span<const std::byte> bytes = view->bytes();
  if (offset > bytes.size() || out.size() > bytes.size() - offset) {
    return DataLossError("read " + Quote(key) + " in " + url() + ": " +
                         std::to_string(out.size()) + " bytes at offset " +
                         std::to_string(offset) +
                         " run past the end of the object (" +
                         std::to_string(bytes.size()) + " bytes)");
  }
  view->WillRead(offset, out.size());
  for (size_t at = 0; at < out.size(); at += kFilledPiece) {
    const size_t len = std::min(kFilledPiece, out.size() - at);
    std::memcpy(out.data() + at, bytes.data() + offset + at, len);
    if (filled) filled(out.subspan(at, len));
  }
  view->DoneReading(offset, out.size());
  return Status();
}

Status ViewedReads::Check(const format::Manifest& manifest,
                          const std::vector<BoxRead>& reads, ThreadPool* pool) {
  // Each chunk once, though slabs of one box, and boxes of one entry, may
  // share it.
  std::vector<ChunkToCheck> chunks;
  for (const BoxRead& r : reads) {
    CKPT_RETURN_IF_ERROR(ForEachChunkMeeting(*r.entry, r.offsets, r.lengths,
                                             [&](const format::ChunkRecord& c) {
                                               chunks.push_back({r.entry, &c});
                                             }));
  }
  std::sort(chunks.begin(), chunks.end(), [](const auto& a, const auto& b) {
    return std::pair(a.chunk->object, a.chunk->offset) <
           std::pair(b.chunk->object, b.chunk->offset);
  });
  chunks.erase(std::unique(chunks.begin(), chunks.end(),
                           [](const auto& a, const auto& b) {
                             return a.chunk == b.chunk;
                           }),
               chunks.end());
  // The views, taken here in object order, one per object, before the
  // threads start.
  std::vector<std::shared_ptr<const ObjectView>> views(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i > 0 && chunks[i].chunk->object == chunks[i - 1].chunk->object) {
      views[i] = views[i - 1];
      continue;
    }
    const std::string& key = manifest.objects[chunks[i].chunk->object].key;
    Result<std::shared_ptr<const ObjectView>> view = Get(key);
    if (!view.ok()) {
      return view.status().WithContext(
          "read entry " + Quote(chunks[i].entry->name) + " from " + key);
    }
    views[i] = *view;
  }
  const int parallelism = pool == nullptr ? 1 : pool->size() + 1;
  // Each thread asks for the chunk it will likely check next while it
  // checks this one, so that the disk reads ahead of the checksums in
  // large requests; small chunks are left to the kernel's own read-ahead.
  auto prefetch = [&](size_t i) {
    const format::ChunkRecord& c = *chunks[i].chunk;
    if (c.StoredLength() >= kPrefetchMin) {
      views[i]->Prefetch(c.offset, c.StoredLength());
    }
  };
  const size_t ahead = static_cast<size_t>(parallelism);
  return ParallelFor(pool, parallelism, chunks.size(), [&](size_t i) {
    if (i < ahead) prefetch(i);
    if (i + ahead < chunks.size()) prefetch(i + ahead);
    const format::ChunkRecord& c = *chunks[i].chunk;
    const ObjectView& view = *views[i];
    const std::span<const std::byte> bytes = view.bytes();
    const uint64_t stored = c.StoredLength();
    if (c.offset > bytes.size() || stored > bytes.size() - c.offset) {
      return DataLossError(
          "read " + manifest.objects[c.object].key + " bytes [" +
          std::to_string(c.offset) + ", " + std::to_string(c.StoredEnd()) +
          ") of entry " + Quote(chunks[i].entry->name) +
          ": the object ends at " + std::to_string(bytes.size()));
    }
    view.WillRead(c.offset, stored);
    Status checked;
    if (!c.compressed()) {
      if (Xxh3_128(bytes.subspan(c.offset, stored)) != c.checksum) {
        checked = ChecksumMismatch(manifest, *chunks[i].entry, c);
      }
    } else {
      // Decompressed here too, into memory of the chunk's size, so that
      // a chunk whose stored bytes match but whose decoding does not fails
      // this pass, before any destination is written.
      auto scratch = std::make_unique_for_overwrite<std::byte[]>(c.length);
      checked = UnpackChunk(manifest, *chunks[i].entry, c,
                            bytes.subspan(c.offset, stored),
                            {scratch.get(), c.length});
    }
    view.DoneReading(c.offset, stored);
    return checked;
  });
}

Status ViewedReads::Copy(const format::Manifest& manifest,
                         const std::vector<BoxRead>& reads, ThreadPool* pool) {
  return ReadBoxes(*this, manifest, reads, pool, Checksums::kChecked);
}

}  // namespace ckpt
