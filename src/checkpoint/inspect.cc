// Inspection: which checkpoints a root holds and what they contain, read
// from the manifests alone (no data object is opened).
#include "checkpoint/inspect.h"

#include "checkpoint/load.h"
#include "util/checksum.h"
#include "util/log.h"

namespace ckpt {

using format::Manifest;

Result<std::optional<int64_t>> Inspector::Latest() {
  Result<std::shared_ptr<const Manifest>> m = root_.manifests.NewestComplete();
  if (!m.ok()) {
    if (m.status().code() == ErrorCode::kNotFound)
      return std::optional<int64_t>();
    return m.status();
  }
  return std::optional<int64_t>((*m)->step);
}

Result<std::vector<CheckpointInfo>> Inspector::List() {
  CKPT_ASSIGN_OR_RETURN(auto listed, root_.manifests.List());
  // Listed after the manifests, as NewestComplete does: a save committing
  // meanwhile wrote its objects before its manifest, so it is not marked.
  CKPT_ASSIGN_OR_RETURN(auto sizes, root_.manifests.ObjectSizes());
  return Infos(listed, &sizes);
}

std::vector<CheckpointInfo> Inspector::Infos(
    const std::vector<std::pair<int64_t, ObjectInfo>>& listed,
    const std::map<std::string, uint64_t>* sizes) {
  std::vector<CheckpointInfo> out;
  for (auto it = listed.rbegin(); it != listed.rend(); ++it) {
    Result<std::shared_ptr<const Manifest>> m =
        root_.manifests.Summary(it->first, it->second);
    if (!m.ok()) {
      root_.manifests.WarnSkipped(it->first, it->second, m.status().ToString());
      continue;
    }
    out.push_back(InfoFromManifest(**m));
    if (sizes)
      out.back().incomplete =
          ManifestStore::MissingObject(**m, *sizes, root_.storage.get());
  }
  return out;
}

namespace {

// A digest of what an entry holds (its boxes and its chunks' checksums), so
// two checkpoints' entries compare without reading data.
EntryInfo DescribeEntry(const format::EntryRecord& rec, bool with_pieces) {
  EntryInfo e;
  e.name = rec.name;
  e.owner = rec.owner;
  e.kind = rec.kind;
  e.dtype = rec.dtype;
  e.shape = rec.shape;
  e.json = rec.json;
  // The digest: the JSON, or the order-free sum of the pieces (boxes and
  // chunk checksums), the same in every manifest version; a version 3
  // directory records the sum, so no index need be read.
  Checksum128 sum;
  if (rec.kind != EntryKind::kMetadata) {
    if (with_pieces) {
      e.num_pieces = rec.pieces.size();
      sum = format::PiecesSum(rec);
    } else {
      e.num_pieces = rec.piece_count;
      sum = rec.pieces_sum;
    }
    // The pieces tile the shape (checked at the commit), so they hold its
    // bytes.
    TensorView shape{rec.dtype, rec.shape, nullptr, false};
    e.bytes = shape.ByteSize().ok() ? *shape.ByteSize() : 0;
  }
  const std::string text =
      (rec.kind == EntryKind::kMetadata ? rec.json : "") + "|" + sum.Hex();
  e.digest = Xxh3_128(text).Hex();
  return e;
}

}  // namespace

Result<CheckpointDescription> Inspector::Describe(std::optional<int64_t> step) {
  // The commit record and the directory say all of it (versions 1 and 2:
  // the manifest).
  CKPT_ASSIGN_OR_RETURN(int64_t s, Loader(root_).ResolveStep(step));
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> m,
                        root_.manifests.Summary(s));
  CheckpointDescription d;
  d.info = InfoFromManifest(*m);
  for (const auto& rec : m->entries) {
    d.entries.push_back(DescribeEntry(rec, m->HasAllPieces()));
  }
  for (const auto& o : m->objects) {
    d.objects.push_back(ObjectInfo{o.key, o.size, 0});
  }
  for (const auto& o : m->metadata_objects) {
    d.metadata_objects.push_back(ObjectInfo{o.key, o.size, 0});
  }
  return d;
}

}  // namespace ckpt
