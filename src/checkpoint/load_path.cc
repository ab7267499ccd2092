// Where an all-or-nothing load checks its host tensors' chunks: where they
// lie in the storage's object views, or read into the manager's staging
// memory (docs/design.md, "Loading").
#include <algorithm>

#include "checkpoint/load.h"
#include "staging/staging.h"

namespace ckpt {

BoxRead BoxOf(const format::EntryRecord* rec, const Entry& e,
              std::span<std::byte> dest) {
  return {rec,
          e.is_piece() ? e.offsets : std::vector<int64_t>(rec->shape.size(), 0),
          e.tensor.shape, dest};
}

bool Loader::ChecksInViews(
    const State& state, const std::vector<const format::EntryRecord*>& records,
    Storage& from, const format::Manifest& m) const {
  const StorageCapabilities caps = from.capabilities();
  if (!caps.object_views) return false;
  // Views need no memory of their own but cost more than reads into
  // staging memory already mapped: without a disk under them (tmpfs,
  // mem://, whose views need no fresh memory either) views, unless the
  // manager holds staging memory for every tensor.
  constexpr uint64_t kPage = 4096;
  uint64_t all_staged = 0;
  for (const Entry& e : state.entries()) {
    if (e.kind != EntryKind::kTensor) continue;
    all_staged =
        (all_staged + *e.tensor.ByteSize() + kPage - 1) / kPage * kPage;
  }
  const bool held = root_.staging.available() >= all_staged;
  if (!caps.direct_reads) return !held;
  // From a disk: objects in the page cache are checked in views (no disk
  // read at all), cold ones read with O_DIRECT into staging memory, mapped
  // now unless that takes over half the memory the machine has free, or
  // more than the manager may keep (Options::async_staging_bytes).
  std::vector<BoxRead> boxes;  // this rank's host tensors
  for (size_t i = 0; i < records.size(); ++i) {
    const Entry& e = state.entries()[i];
    if (e.kind == EntryKind::kTensor && e.tensor.location.is_host()) {
      boxes.push_back(BoxOf(records[i], e));
    }
  }
  if (ResidentFraction(from, m, boxes) >= 0.9) return true;
  const uint64_t bound = root_.options.async_staging_bytes;
  return !held &&
         (all_staged > FreeMemory() / 2 || (bound > 0 && all_staged > bound));
}

}  // namespace ckpt
