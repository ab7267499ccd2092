// Save step 3b (manifest version 3): every rank writes its chunk rows into
// its own index object, "step-N/rRRRRR-<attempt>.ckptidx", durably, and
// keeps only the index's digest for the coordinator (save.cc has the whole
// protocol).
#include <map>

#include "checkpoint/save.h"
#include "format/constants.h"
#include "util/names.h"

namespace ckpt {

std::vector<ChunkRow> RootContext::TakeRows(size_t k, size_t n) {
  std::vector<ChunkRow> rows;
  if (k < spare_rows.size()) rows = std::move(spare_rows[k]);
  rows.clear();
  rows.reserve(n);
  return rows;
}

void Saver::WriteIndex(int64_t step, const std::string& attempt,
                       const SavePlan& plan, WriteResult& result) {
  if (!result.status.ok()) return;
  const std::string key =
      format::IndexObjectKey(step, root_.comm().rank(), attempt);
  format::RankIndex x;
  x.step = step;
  x.rank = root_.comm().rank();
  x.world_size = root_.comm().size();
  format::ParseAttempt(attempt, &x.attempt);
  // Its own object first, then the parent's it references.
  const auto add = [&](const std::string& k, uint64_t size) {
    format::DataObjectId id;
    if (!format::ParseDataObjectId(k, &id)) return false;
    id.size = size;
    x.objects.push_back(id);
    return true;
  };
  if (!result.key.empty()) add(result.key, result.size);
  const uint32_t first_ref = static_cast<uint32_t>(x.objects.size());
  for (const ObjectRef& o : result.refs) {
    if (!add(o.key, o.size)) {
      result.status = FailedPreconditionError(
          "write " + key + ": the parent's object " + Quote(o.key) +
          " is not named like a data object; save in full or with "
          "Options::metadata_layout kJson");
      return;
    }
  }
  x.pieces.reserve(result.pieces.size());
  std::map<uint32_t, Checksum128> sums;  // entry -> PiecesSum of mine
  // The rows move into the index, renumbered in place: the coordinator
  // needs only the index's digest, and a failed save sends no rows.
  for (PieceChunks& p : result.pieces) {
    const PlannedPiece& pp = plan.pieces[p.piece];
    format::IndexPiece& ip = x.pieces.emplace_back();
    ip.entry = static_cast<uint32_t>(pp.entry);
    ip.offsets = pp.offsets;
    ip.lengths = pp.lengths;
    for (ChunkRow& c : p.chunks) {
      c.object = c.object == kOwnObject ? 0 : first_ref + c.object;
    }
    ip.chunks = std::move(p.chunks);
    Checksum128& sum = sums[ip.entry];
    sum = format::AddSums(sum,
                          format::PieceHash(ip.offsets, ip.lengths, ip.chunks));
  }
  const std::string bytes = format::EncodeRankIndex(x);
  // Durable before the result goes out: the commit names it.
  Status s = Guard("write " + key, [&]() -> Status {
    // A large index goes the way data objects do (file://: O_DIRECT from
    // this memory where it is aligned).
    constexpr size_t kStreamFrom = size_t{1} << 20;
    if (bytes.size() < kStreamFrom) return root_.storage->PutString(key, bytes);
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableObject> out,
                          root_.storage->NewWritable(key));
    CKPT_RETURN_IF_ERROR(out->AppendRetained(std::as_bytes(std::span(bytes))));
    return out->Close();
  });
  if (!s.ok()) {
    result.status = s;
    return;
  }
  result.indexed = true;
  for (const auto& [entry, sum] : sums)
    result.entry_sums.push_back({entry, sum});
  result.index_size = bytes.size();
  result.index_checksum = Xxh3_128(bytes);
  result.pieces.clear();  // the coordinator needs only the digest
  // The next incremental save's parent index of this rank, if this commits.
  root_.manifests.RememberIndex(result.index_size, result.index_checksum,
                                std::move(x));
}

}  // namespace ckpt
