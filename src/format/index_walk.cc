// Version 3's whole-checkpoint checks one index at a time (IndexWalk in
// index.h): what Assemble checks with every index at once, for verify,
// which must look at every piece of a checkpoint of many ranks without
// holding them all (docs/design.md, "Metadata at scale").
#include <algorithm>

#include "format/index.h"
#include "util/names.h"

namespace ckpt::format {

IndexWalk::IndexWalk(const Manifest& header, const Directory& dir,
                     std::string what)
    : dir_(dir),
      what_(std::move(what)),
      assembler_(header, dir, what_),
      seen_(static_cast<size_t>(std::max(dir.world_size, 0)), false),
      sums_(dir.entries.size()),
      spans_(dir.objects.size()) {
  object_at_.reserve(dir.objects.size());
  for (uint32_t i = 0; i < dir.objects.size(); ++i) {
    object_at_.emplace(dir.objects[i].Key(), i);
  }
}

Status IndexWalk::CheckEntriesDisjoint() const {
  // One entry's boxes at a time, as the runs give them: the directory
  // checked that the runs stay inside the shape and the world and that
  // their pieces are bounded by the indexes' bytes, so expanding them is
  // bounded too.
  for (const DirectoryEntry& de : dir_.entries) {
    if (de.kind == EntryKind::kMetadata) continue;
    EntryRecord e;
    e.name = de.name;
    for (const PieceRun& run : de.runs) {
      for (uint64_t i = 0; i < run.count; ++i) {
        PieceRecord p;
        p.rank = RunPiece(run, i, p.offsets);
        p.lengths = run.lengths;
        e.pieces.push_back(std::move(p));
      }
    }
    CKPT_RETURN_IF_ERROR_CTX(CheckPiecesDisjoint(e, EntryWhere(de)), what_);
  }
  return Status();
}

Result<Manifest> IndexWalk::Next(RankIndex index) {
  const int32_t rank = index.rank;
  // Checks the rank (inside the world, of this save) before it is used.
  CKPT_ASSIGN_OR_RETURN(Manifest m, assembler_.Assemble(std::move(index)));
  if (seen_[static_cast<size_t>(rank)]) {
    return DataLossError(what_ + ": an index is given twice");
  }
  seen_[static_cast<size_t>(rank)] = true;
  for (size_t ei = 0; ei < m.entries.size(); ++ei) {
    const EntryRecord& e = m.entries[ei];
    if (e.kind == EntryKind::kMetadata || e.pieces.empty()) continue;
    sums_[ei] = AddSums(sums_[ei], PiecesSum(e));
    for (const PieceRecord& p : e.pieces) {
      for (const ChunkRecord& c : p.chunks) {
        // Assemble found every object of the index in the directory.
        const uint32_t o = object_at_.at(m.objects[c.object].key);
        spans_[o].push_back(
            {c.offset, c.StoredLength(), static_cast<uint32_t>(ei), p.rank});
      }
    }
  }
  return m;
}

Status IndexWalk::Finish() {
  if (std::find(seen_.begin(), seen_.end(), false) != seen_.end()) {
    return DataLossError(what_ + ": an index is missing");
  }
  for (size_t ei = 0; ei < dir_.entries.size(); ++ei) {
    const DirectoryEntry& de = dir_.entries[ei];
    if (de.kind != EntryKind::kMetadata && sums_[ei] != de.pieces_sum) {
      return DataLossError(what_ + ": entry " + Quote(de.name) +
                           ": its pieces are not those the directory sums");
    }
  }
  const auto owner = [&](const Span& s) {
    return "entry " + Quote(dir_.entries[s.entry].name) + " (rank " +
           std::to_string(s.rank) + ")";
  };
  for (size_t o = 0; o < spans_.size(); ++o) {
    std::vector<Span>& spans = spans_[o];
    // A save writes an object's chunks in order, and ranks' indexes come in
    // order: sorted already, unless something is wrong.
    const auto before = [](const Span& a, const Span& b) {
      return a.offset < b.offset;
    };
    if (!std::is_sorted(spans.begin(), spans.end(), before)) {
      std::sort(spans.begin(), spans.end(), before);
    }
    for (size_t i = 0; i + 1 < spans.size(); ++i) {
      const Span& a = spans[i];
      const Span& b = spans[i + 1];
      // Inside their object (Assemble checked each piece), so no wrap.
      if (a.offset + a.length > b.offset) {
        return DataLossError(
            what_ + ": object " + Quote(dir_.objects[o].Key()) + ": bytes [" +
            std::to_string(b.offset) + ", " +
            std::to_string(b.offset + b.length) + ") of " + owner(b) +
            " overlap bytes [" + std::to_string(a.offset) + ", " +
            std::to_string(a.offset + a.length) + ") of " + owner(a));
      }
    }
    spans = {};
  }
  return Status();
}

}  // namespace ckpt::format
