// Incremental saves: which chunks of this rank's pieces are written and which
// point into the parent checkpoint's data files.
//
// A chunk may be referenced only where the cut is identical: same entry (and
// owner), dtype and global shape, a parent piece with the same box, the same
// chunk size, and the parent's chunk rows laid out exactly as this save
// would cut the piece. Then chunk k of the new piece covers the same bytes as
// chunk k of the parent's, and equal checksums mean equal bytes. The parent's
// data is never read: its manifest's checksums are compared with the new
// state's, or, with dirty rows, chunks away from them are taken as unchanged.
//
// Written chunks go into this rank's data object. A piece written whole is a
// tensor with its own name, dtype and shape; a piece written in part holds
// each run of consecutive written chunks as a U8 tensor named
// "<entry>@<first chunk index>", so the object stays a valid safetensors file
// whose tensors hold exactly the chunks the manifest names.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/state.h"
#include "data/planner.h"
#include "data/writer.h"
#include "format/manifest.h"

namespace ckpt {

using DirtyRows =
    std::map<std::string, std::vector<std::pair<int64_t, int64_t>>>;

// One chunk of a piece: a chunk of the parent's (`ref` points into the
// parent manifest, which must outlive it, and names its object there), or
// chunk `index` of run `run`. Small on purpose: a 2 GiB state of 4 KiB
// chunks has half a million of them at every save.
struct ChunkSlot {
  const format::ChunkRecord* ref = nullptr;
  size_t run = 0;
  size_t index = 0;
};

struct IncrementalWrites {
  std::vector<PieceToWrite> runs;             // what this rank writes
  std::vector<std::vector<ChunkSlot>> slots;  // per piece of `mine`
  uint64_t referenced_bytes = 0;
  uint64_t total_bytes = 0;
};

// Splits the pieces `mine` (indices into plan.pieces that this rank writes
// from `state`) into references into `parent` and runs to write. With a null
// parent everything is written, one run per piece. `dirty_rows` are used
// only when `use_dirty_rows` (they describe changes since the parent);
// otherwise every chunk is hashed. InvalidArgument for dirty rows that name
// no tensor or are not non-empty ranges inside its first dimension.
Result<IncrementalWrites> PlanIncrementalWrites(
    const SavePlan& plan, const std::vector<size_t>& mine, const State& state,
    const format::Manifest* parent, uint64_t chunk_size, int world_size,
    const DirtyRows& dirty_rows, bool use_dirty_rows);

}  // namespace ckpt
