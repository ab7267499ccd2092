// Inspection: which checkpoints a root holds and what they contain, read
// from the manifests alone (no data object is opened).
#include "checkpoint/manager_impl.h"
#include "util/checksum.h"
#include "util/log.h"

namespace ckpt {

using format::Manifest;

Result<std::optional<int64_t>> CheckpointManager::Impl::Latest() {
  Result<std::shared_ptr<const Manifest>> m = manifests_.NewestComplete();
  if (!m.ok()) {
    if (m.status().code() == ErrorCode::kNotFound)
      return std::optional<int64_t>();
    return m.status();
  }
  return std::optional<int64_t>((*m)->step);
}

Result<std::vector<CheckpointInfo>> CheckpointManager::Impl::List() {
  CKPT_ASSIGN_OR_RETURN(auto listed, manifests_.List());
  // Listed after the manifests, as NewestComplete does: a save committing
  // meanwhile wrote its objects before its manifest, so it is not marked.
  CKPT_ASSIGN_OR_RETURN(auto sizes, manifests_.ObjectSizes());
  return Infos(listed, &sizes);
}

Result<std::vector<CheckpointInfo>> CheckpointManager::Impl::ListCommitted() {
  CKPT_ASSIGN_OR_RETURN(auto listed, manifests_.List());
  return Infos(listed, nullptr);
}

std::vector<CheckpointInfo> CheckpointManager::Impl::Infos(
    const std::vector<std::pair<int64_t, ObjectInfo>>& listed,
    const std::map<std::string, uint64_t>* sizes) {
  std::vector<CheckpointInfo> out;
  for (auto it = listed.rbegin(); it != listed.rend(); ++it) {
    Result<std::shared_ptr<const Manifest>> m =
        manifests_.Summary(it->first, it->second);
    if (!m.ok()) {
      LogWarning("skipping step " + std::to_string(it->first) + ": " +
                 m.status().ToString());
      continue;
    }
    out.push_back(InfoFromManifest(**m));
    if (sizes)
      out.back().incomplete = ManifestStore::MissingObject(**m, *sizes);
  }
  return out;
}

namespace {

// A digest of what an entry holds (its boxes and its chunks' checksums), so
// two checkpoints' entries compare without reading data.
EntryInfo DescribeEntry(const format::EntryRecord& rec) {
  EntryInfo e;
  e.name = rec.name;
  e.owner = rec.owner;
  e.kind = rec.kind;
  e.dtype = rec.dtype;
  e.shape = rec.shape;
  e.num_pieces = rec.pieces.size();
  e.json = rec.json;
  Xxh3Hasher digest;
  auto feed = [&](std::string_view s) {
    digest.Update(std::span<const std::byte>(
        reinterpret_cast<const std::byte*>(s.data()), s.size()));
  };
  feed(rec.kind == EntryKind::kMetadata ? rec.json : "");
  for (const auto& p : rec.pieces) {
    for (size_t i = 0; i < p.offsets.size(); ++i) {
      feed(std::to_string(p.offsets[i]) + ":" + std::to_string(p.lengths[i]) +
           ",");
    }
    for (const auto& c : p.chunks) {
      e.bytes += c.length;
      feed(c.checksum.Hex());
    }
  }
  e.digest = digest.Digest().Hex();
  return e;
}

}  // namespace

Result<CheckpointDescription> CheckpointManager::Impl::Describe(
    std::optional<int64_t> step) {
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> m, Resolve(step));
  CheckpointDescription d;
  d.info = InfoFromManifest(*m);
  for (const auto& rec : m->entries) d.entries.push_back(DescribeEntry(rec));
  for (const auto& o : m->objects) {
    d.objects.push_back(ObjectInfo{o.key, o.size, 0});
  }
  for (const auto& o : m->metadata_objects) {
    d.metadata_objects.push_back(ObjectInfo{o.key, o.size, 0});
  }
  return d;
}

}  // namespace ckpt
