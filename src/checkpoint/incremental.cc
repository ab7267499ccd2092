#include "checkpoint/incremental.h"

#include <algorithm>
#include <set>

#include "format/layout.h"
#include "util/checksum.h"
#include "util/names.h"

namespace ckpt {
namespace {

// The parent's piece with exactly this entry and box, if its chunks are cut
// the way this save cuts `bytes` into `chunk_size` pieces; else null.
const format::PieceRecord* MatchingPiece(const format::Manifest& parent,
                                         const PlannedEntry& e,
                                         const PlannedPiece& p,
                                         uint64_t chunk_size) {
  if (parent.chunk_size != chunk_size) return nullptr;
  const format::EntryRecord* old =
      e.owner >= 0 ? parent.FindLocal(e.name, e.owner) : parent.Find(e.name);
  if (old == nullptr || old->kind != e.kind || old->dtype != e.dtype ||
      old->shape != e.shape) {
    return nullptr;
  }
  for (const format::PieceRecord& q : old->pieces) {
    if (q.offsets != p.offsets || q.lengths != p.lengths) continue;
    const uint64_t n = (p.bytes + chunk_size - 1) / chunk_size;
    if (q.chunks.size() != n) return nullptr;
    for (uint64_t k = 0; k < n; ++k) {
      if (q.chunks[k].length != std::min(chunk_size, p.bytes - k * chunk_size))
        return nullptr;
    }
    return &q;
  }
  return nullptr;
}

// Byte ranges of the piece (relative to its start) that `rows` touch; an
// error names the tensor if a range is malformed.
Result<std::vector<std::pair<uint64_t, uint64_t>>> DirtyBytes(
    const PlannedEntry& e, const PlannedPiece& p,
    const std::vector<std::pair<int64_t, int64_t>>& rows) {
  if (e.shape.empty()) {
    return InvalidArgumentError("dirty rows of " + Quote(e.name) +
                                ": a 0-d tensor has no rows");
  }
  uint64_t row_bytes = DTypeSize(e.dtype);
  for (size_t d = 1; d < p.lengths.size(); ++d) {
    row_bytes *= static_cast<uint64_t>(p.lengths[d]);
  }
  std::vector<std::pair<uint64_t, uint64_t>> out;
  const int64_t lo = p.offsets[0];
  const int64_t hi = lo + p.lengths[0];
  for (const auto& [first, last] : rows) {
    if (first < 0 || first >= last || last > e.shape[0]) {
      return InvalidArgumentError("dirty rows of " + Quote(e.name) + ": [" +
                                  std::to_string(first) + ", " +
                                  std::to_string(last) +
                                  ") is not a non-empty range inside [0, " +
                                  std::to_string(e.shape[0]) + ")");
    }
    const int64_t b = std::max(first, lo);
    const int64_t x = std::min(last, hi);
    if (b >= x) continue;
    out.emplace_back(static_cast<uint64_t>(b - lo) * row_bytes,
                     static_cast<uint64_t>(x - lo) * row_bytes);
  }
  return out;
}

// Whether [begin, end) meets one of `ranges` (sorted, disjoint). `next`
// carries the search over from the previous, earlier chunk, so asking about
// every chunk of a piece in order is one pass.
bool Touches(const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
             size_t* next, uint64_t begin, uint64_t end) {
  while (*next < ranges.size() && ranges[*next].second <= begin) ++*next;
  return *next < ranges.size() && ranges[*next].first < end;
}

}  // namespace

Result<IncrementalWrites> PlanIncrementalWrites(
    const SavePlan& plan, const std::vector<size_t>& mine, const State& state,
    const format::Manifest* parent, uint64_t chunk_size, int world_size,
    const DirtyRows& dirty_rows, bool use_dirty_rows) {
  std::set<std::string_view> names;
  for (const PlannedEntry& e : plan.entries) names.insert(e.name);
  for (const auto& [name, rows] : dirty_rows) {
    if (!names.count(name)) {
      return InvalidArgumentError("dirty rows name " + Quote(name) +
                                  ", which the state does not hold");
    }
  }
  IncrementalWrites out;
  out.slots.resize(mine.size());
  for (size_t m = 0; m < mine.size(); ++m) {
    const PlannedPiece& p = plan.pieces[mine[m]];
    const PlannedEntry& e = plan.entries[p.entry];
    const Entry* local = state.Find(e.name);
    const std::span<const std::byte> bytes(local->tensor.data, p.bytes);
    out.total_bytes += p.bytes;
    const uint64_t n = (p.bytes + chunk_size - 1) / chunk_size;
    const format::PieceRecord* old =
        parent ? MatchingPiece(*parent, e, p, chunk_size) : nullptr;
    std::vector<std::pair<uint64_t, uint64_t>> dirty;
    auto listed = dirty_rows.find(e.name);
    if (listed != dirty_rows.end()) {
      CKPT_ASSIGN_OR_RETURN(dirty, DirtyBytes(e, p, listed->second));
      std::sort(dirty.begin(), dirty.end());
      std::vector<std::pair<uint64_t, uint64_t>> merged;
      for (const auto& r : dirty) {
        if (!merged.empty() && r.first <= merged.back().second) {
          merged.back().second = std::max(merged.back().second, r.second);
        } else {
          merged.push_back(r);
        }
      }
      dirty = std::move(merged);
      if (!use_dirty_rows) listed = dirty_rows.end();
    }
    // Which chunks can point into the parent.
    std::vector<const format::ChunkRecord*> refs(n, nullptr);
    size_t next_dirty = 0;
    bool none = true;
    for (uint64_t k = 0; old != nullptr && k < n; ++k) {
      const format::ChunkRecord& c = old->chunks[k];
      if (parent->objects[c.object].rank >= world_size) continue;
      const uint64_t begin = k * chunk_size;
      const uint64_t end = begin + c.length;
      const bool same =
          listed != dirty_rows.end()
              ? !Touches(dirty, &next_dirty, begin, end)
              : Xxh3_128(bytes.subspan(begin, c.length)) == c.checksum;
      if (same) {
        refs[k] = &c;
        none = false;
      }
    }
    // Runs of written chunks; a piece with no reference is written whole.
    std::vector<std::pair<uint64_t, uint64_t>> runs;  // [first, last) chunks
    for (uint64_t k = 0; !none && k < n;) {
      if (refs[k]) {
        ++k;
        continue;
      }
      uint64_t j = k;
      while (j < n && !refs[j]) ++j;
      runs.emplace_back(k, j);
      k = j;
    }
    // A run's tensor name must not be another entry's name.
    const bool clash = std::any_of(runs.begin(), runs.end(), [&](auto r) {
      return names.count(format::RunTensorName(e.name, r.first)) > 0;
    });
    std::vector<ChunkSlot>& slots = out.slots[m];
    slots.reserve(n);
    if (none || clash) {
      out.runs.push_back(PieceToWrite{e.name, e.dtype, p.lengths, bytes});
      for (uint64_t k = 0; k < n; ++k) {
        slots.push_back(ChunkSlot{nullptr, out.runs.size() - 1, k});
      }
      continue;
    }
    size_t run = 0;
    for (uint64_t k = 0; k < n; ++k) {
      if (refs[k]) {
        out.referenced_bytes += refs[k]->length;
        slots.push_back(ChunkSlot{refs[k], 0, 0});
        continue;
      }
      while (runs[run].second <= k) ++run;  // runs are in chunk order
      slots.push_back(
          ChunkSlot{nullptr, out.runs.size() + run, k - runs[run].first});
    }
    for (const auto& [first, last] : runs) {
      const uint64_t begin = first * chunk_size;
      const uint64_t len = std::min(last * chunk_size, p.bytes) - begin;
      out.runs.push_back(
          PieceToWrite{format::RunTensorName(e.name, first), DType::kU8,
                       std::vector<int64_t>{static_cast<int64_t>(len)},
                       bytes.subspan(begin, len)});
    }
  }
  return out;
}

}  // namespace ckpt
