// Where an all-or-nothing load checks its host tensors' chunks: where they
// lie in the storage's object views, or read into the manager's staging
// memory (docs/design.md, "Loading"); and, before that, that the objects
// they lie in are there.
#include <algorithm>
#include <set>

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

Status Loader::CheckObjects(
    const format::Manifest& m,
    const std::vector<const format::EntryRecord*>& entries) {
  std::set<uint32_t> needed;
  for (const auto* e : entries) {
    for (const auto& p : e->pieces) {
      for (const auto& c : p.chunks) needed.insert(c.object);
    }
  }
  const std::string where =
      "step " + std::to_string(m.step) + " in " + root_.Where();
  for (uint32_t i : needed) {
    const format::ObjectRecord& o = m.objects[i];
    Result<ObjectInfo> info = root_.storage->Stat(o.key);
    if (!info.ok()) {
      if (info.status().code() == ErrorCode::kNotFound) {
        return DataLossError(where + ": data object " + o.key + " is missing");
      }
      // A symbolic link in its place (never followed): what ckpt wrote is
      // not there, as `ckpt ls` and verify say, so a resume goes on to an
      // older checkpoint rather than stopping here.
      if (info.status().code() == ErrorCode::kInvalidArgument) {
        return DataLossError(where + ": data object " + o.key +
                             " cannot be read: " + info.status().message());
      }
      return info.status().WithContext("stat " + o.key);
    }
    if (info->size != o.size) {
      return DataLossError(where + ": data object " + o.key + " is " +
                           std::to_string(info->size) +
                           " bytes but the manifest records " +
                           std::to_string(o.size) + " (truncated or replaced)");
    }
  }
  return Status();
}

}  // namespace ckpt
