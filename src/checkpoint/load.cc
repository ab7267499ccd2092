// Loading, on every rank (any number of ranks, any split):
//
//   1. Resolve the step: the one asked for, or the newest complete one: its
//      manifest validates and a listing shows every object it names with
//      the recorded size (others are skipped with a warning). With many ranks,
//      rank 0 picks and broadcasts, so ranks racing a concurrent commit never
//      load different steps. Of a version 3 checkpoint a rank reads the
//      commit record, the directory and only the indexes of the ranks whose
//      pieces meet the boxes it loads.
//   2. Match the state against the manifest: every entry present with the
//      same kind, dtype and global shape, views writable, rank-local entries
//      only at the saving world size, no extras under `strict`.
//   3. Check that every object the needed chunks lie in exists with the size
//      the manifest records.
//   4. Only then read: blobs and metadata directly, tensors as the chunks
//      that intersect this rank's box, in slabs on the I/O pool, each chunk
//      checked against its checksum (a mismatch is DataLoss naming object,
//      range and entry; buffers may then be partly written). Tensors on a
//      CUDA device are read into the staging memory, page-locked, and
//      copied to their devices once every read has succeeded: a failed load
//      leaves device memory as it was.
#include <algorithm>
#include <set>

#include "checkpoint/manager_impl.h"
#include "util/dtype_text.h"
#include "util/names.h"

namespace ckpt {

using format::Manifest;

namespace {

std::span<std::byte> BytesOf(std::string& s) {
  return std::span<std::byte>(reinterpret_cast<std::byte*>(s.data()), s.size());
}

}  // namespace

Result<int64_t> CheckpointManager::Impl::ResolveStep(
    std::optional<int64_t> step) {
  if (step) return *step;
  if (comm().size() == 1) {
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> newest,
                          manifests_.NewestComplete());
    return newest->step;
  }
  std::string mine;
  if (comm().rank() == 0) {
    Result<std::shared_ptr<const Manifest>> m = manifests_.NewestComplete();
    mine = EncodeResolvedStep(m.ok() ? ResolvedStep{Status(), (*m)->step}
                                     : ResolvedStep{m.status(), -1});
  }
  CKPT_ASSIGN_OR_RETURN(std::string agreed, comm().Broadcast(mine, 0));
  CKPT_ASSIGN_OR_RETURN(ResolvedStep resolved, DecodeResolvedStep(agreed));
  CKPT_RETURN_IF_ERROR(resolved.status);
  return resolved.step;
}

Result<std::shared_ptr<const Manifest>> CheckpointManager::Impl::Resolve(
    std::optional<int64_t> step) {
  CKPT_ASSIGN_OR_RETURN(int64_t s, ResolveStep(step));
  return manifests_.Read(s);
}

Result<std::shared_ptr<const Manifest>> CheckpointManager::Impl::ResolveFor(
    std::optional<int64_t> step, const State& state) {
  CKPT_ASSIGN_OR_RETURN(int64_t s, ResolveStep(step));
  // The boxes this rank loads: of a version 3 checkpoint it reads only the
  // indexes whose pieces meet them.
  std::vector<ManifestStore::Want> wants;
  for (const Entry& e : state.entries()) {
    if (e.kind == EntryKind::kMetadata) continue;
    ManifestStore::Want& w = wants.emplace_back();
    w.name = e.name;
    w.owner = e.rank_local ? comm().rank() : -1;
    if (e.kind == EntryKind::kTensor && e.is_piece()) {
      w.offsets = e.offsets;
      w.lengths = e.tensor.shape;
    }
  }
  return manifests_.ReadFor(s, wants);
}

Result<std::vector<const format::EntryRecord*>>
CheckpointManager::Impl::MatchEntries(const Manifest& m, const State& state,
                                      const LoadOptions& load,
                                      const std::string& op) {
  const int rank = comm().rank();
  std::vector<const format::EntryRecord*> records;
  for (const Entry& e : state.entries()) {
    const format::EntryRecord* rec;
    if (e.rank_local) {
      if (m.world_size != comm().size()) {
        return FailedPreconditionError(
            op + ": entry " + Quote(e.name) +
            " is rank-local and was saved by " + std::to_string(m.world_size) +
            " ranks, but " + std::to_string(comm().size()) +
            " ranks load it; use LoadRankLocal to get every rank's value and "
            "merge them");
      }
      rec = m.FindLocal(e.name, rank);
    } else {
      rec = m.Find(e.name);
    }
    if (rec == nullptr) {
      return NotFoundError(op + ": the checkpoint has no " +
                           (e.rank_local ? "rank-local " : "") + "entry " +
                           Quote(e.name));
    }
    if (rec->kind != e.kind) {
      return InvalidArgumentError(
          op + ": entry " + Quote(e.name) + " is a " +
          std::string(EntryKindName(rec->kind)) + " in the checkpoint but a " +
          std::string(EntryKindName(e.kind)) + " in the state");
    }
    if (e.kind == EntryKind::kTensor) {
      if (rec->dtype != e.tensor.dtype || rec->shape != e.full_shape()) {
        return InvalidArgumentError(
            op + ": entry " + Quote(e.name) + " is " +
            DescribeTensorType(rec->dtype, rec->shape) +
            " in the checkpoint but " +
            DescribeTensorType(e.tensor.dtype, e.full_shape()) +
            " in the state");
      }
      if (!e.tensor.writable) {
        return InvalidArgumentError(op + ": entry " + Quote(e.name) +
                                    " is a read-only view; Load needs a "
                                    "writable one");
      }
    }
    records.push_back(rec);
  }
  if (load.strict) {
    for (const auto& rec : m.entries) {
      if (rec.owner >= 0 && rec.owner != rank) continue;
      const Entry* e = state.Find(rec.name);
      if (e == nullptr || e->rank_local != (rec.owner >= 0)) {
        return InvalidArgumentError(
            op + ": strict load: the state has no entry " + Quote(rec.name));
      }
    }
  }
  return records;
}

Status CheckpointManager::Impl::CheckObjects(
    const Manifest& m, const std::vector<const format::EntryRecord*>& entries) {
  std::set<uint32_t> needed;
  for (const auto* e : entries) {
    for (const auto& p : e->pieces) {
      for (const auto& c : p.chunks) needed.insert(c.object);
    }
  }
  const std::string where = "step " + std::to_string(m.step) + " in " + Where();
  for (uint32_t i : needed) {
    const format::ObjectRecord& o = m.objects[i];
    Result<ObjectInfo> info = storage_->Stat(o.key);
    if (!info.ok()) {
      if (info.status().code() == ErrorCode::kNotFound) {
        return DataLossError(where + ": data object " + o.key + " is missing");
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

Result<CheckpointInfo> CheckpointManager::Impl::Load(
    std::optional<int64_t> step, State& state, const LoadOptions& load) {
  CKPT_RETURN_IF_ERROR(state.status());
  // 1. Resolve.
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> m,
                        ResolveFor(step, state));
  const std::string op =
      "load step " + std::to_string(m->step) + " from " + Where();
  // 2-3. Everything that can be checked without reading data is checked
  // before the first byte lands in the caller's buffers.
  CKPT_ASSIGN_OR_RETURN(std::vector<const format::EntryRecord*> records,
                        MatchEntries(*m, state, load, op));
  CKPT_RETURN_IF_ERROR(CheckObjects(*m, records));
  // 4. Read.
  const CudaDriver* cuda = nullptr;
  std::vector<DeviceCopy> to_devices;  // in the order of the state's entries
  if (const Entry* first = FirstDeviceTensor(state)) {
    CKPT_ASSIGN_OR_RETURN(cuda, DriverFor(*first, op));
    CKPT_ASSIGN_OR_RETURN(to_devices, BounceDeviceTensors(state, *cuda, op));
  }
  size_t next_device = 0;
  std::vector<BoxRead> reads;  // tensors, read in parallel at the end
  for (const format::EntryRecord* rec : records) {
    Entry* e = state.Find(rec->name);
    switch (rec->kind) {
      case EntryKind::kTensor: {
        // The box this rank holds: a piece, or the whole tensor. Records
        // follow the state's entries, so device tensors come in order.
        const std::vector<int64_t> offsets =
            e->is_piece() ? e->offsets
                          : std::vector<int64_t>(rec->shape.size(), 0);
        std::byte* into = e->tensor.location.is_host()
                              ? e->tensor.data
                              : to_devices[next_device++].host;
        AddSlabs(BoxRead{rec, offsets, e->tensor.shape,
                         std::span<std::byte>(into, *e->tensor.ByteSize())},
                 reads);
        break;
      }
      case EntryKind::kBlob: {
        std::string bytes(static_cast<size_t>(rec->shape[0]), '\0');
        CKPT_RETURN_IF_ERROR_CTX(ReadEntry(*storage_, *m, *rec, BytesOf(bytes)),
                                 op);
        CKPT_RETURN_IF_ERROR(state.SetBlob(rec->name, std::move(bytes)));
        break;
      }
      case EntryKind::kMetadata:
        CKPT_RETURN_IF_ERROR(state.SetMetadataJson(rec->name, rec->json));
        break;
    }
  }
  CKPT_RETURN_IF_ERROR_CTX(ReadBoxes(*storage_, *m, reads, IoPool()), op);
  if (cuda != nullptr) {
    CKPT_RETURN_IF_ERROR(
        CopyToDevices(*cuda, to_devices, state.cuda_stream(), op));
  }
  return InfoFromManifest(*m);
}

Result<std::vector<DeviceCopy>> CheckpointManager::Impl::BounceDeviceTensors(
    const State& state, const CudaDriver& cuda, const std::string& op) {
  // Each on a page of its own, as large staged entries are.
  constexpr uint64_t kPage = 4096;
  std::vector<std::pair<const Entry*, uint64_t>> placed;
  uint64_t used = 0;
  for (const Entry& e : state.entries()) {
    if (e.tensor.location.is_host()) continue;
    placed.emplace_back(&e, used);
    used = (used + *e.tensor.ByteSize() + kPage - 1) / kPage * kPage;
  }
  CKPT_ASSIGN_OR_RETURN(std::span<std::byte> memory,
                        staging_.Reserve(std::max(used, kPage)));
  CKPT_RETURN_IF_ERROR(
      staging_.Register(cuda, placed[0].first->tensor.location.device(), op));
  std::vector<DeviceCopy> copies;
  for (const auto& [e, at] : placed) {
    copies.push_back(DeviceCopy{e, memory.data() + at});
  }
  return copies;
}

Status CheckpointManager::Impl::ReadInto(
    const Manifest& m, const std::vector<const format::EntryRecord*>& records,
    const std::vector<std::string>& names, LoadedCheckpoint& out) {
  const std::string op =
      "load step " + std::to_string(m.step) + " from " + Where();
  // The objects must really hold the bytes the manifest claims before any
  // buffer is sized from the manifest's shapes.
  CKPT_RETURN_IF_ERROR(CheckObjects(m, records));
  out.info = InfoFromManifest(m);
  std::vector<BoxRead> reads;  // tensors, read in parallel at the end
  for (size_t i = 0; i < records.size(); ++i) {
    const format::EntryRecord* rec = records[i];
    switch (rec->kind) {
      case EntryKind::kTensor: {
        CKPT_ASSIGN_OR_RETURN(
            TensorView view,
            out.state.AllocateTensor(names[i], rec->dtype, rec->shape));
        AddSlabs(
            BoxRead{rec, std::vector<int64_t>(rec->shape.size(), 0), rec->shape,
                    std::span<std::byte>(view.data, *view.ByteSize())},
            reads);
        break;
      }
      case EntryKind::kBlob: {
        std::string bytes(static_cast<size_t>(rec->shape[0]), '\0');
        CKPT_RETURN_IF_ERROR_CTX(ReadEntry(*storage_, m, *rec, BytesOf(bytes)),
                                 op);
        out.state.AddBlob(names[i], std::move(bytes));
        break;
      }
      case EntryKind::kMetadata:
        out.state.AddMetadataJson(names[i], rec->json);
        break;
    }
  }
  CKPT_RETURN_IF_ERROR_CTX(ReadBoxes(*storage_, m, reads, IoPool()), op);
  return out.state.status();
}

Result<LoadedCheckpoint> CheckpointManager::Impl::LoadAll(
    std::optional<int64_t> step, const std::vector<std::string>& names) {
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> m, Resolve(step));
  const std::string op =
      "load step " + std::to_string(m->step) + " from " + Where();
  std::vector<const format::EntryRecord*> records;
  std::vector<std::string> as;
  if (names.empty()) {
    for (const auto& rec : m->entries) {
      records.push_back(&rec);
      as.push_back(rec.owner < 0 ? rec.name
                                 : RankLocalName(rec.name, rec.owner));
    }
  } else {
    for (const std::string& n : names) {
      const format::EntryRecord* rec = m->Find(n);
      if (rec == nullptr) {
        return NotFoundError(op + ": the checkpoint has no entry " + Quote(n));
      }
      records.push_back(rec);
      as.push_back(n);
    }
  }
  LoadedCheckpoint out;
  CKPT_RETURN_IF_ERROR(ReadInto(*m, records, as, out));
  return out;
}

Result<LoadedCheckpoint> CheckpointManager::Impl::LoadRankLocal(
    std::optional<int64_t> step, std::string_view name) {
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> m, Resolve(step));
  std::vector<const format::EntryRecord*> records;
  std::vector<std::string> as;
  for (int32_t r = 0; r < m->world_size; ++r) {
    if (const format::EntryRecord* rec = m->FindLocal(name, r)) {
      records.push_back(rec);
      as.push_back(std::to_string(r));
    }
  }
  if (records.empty()) {
    return NotFoundError("load step " + std::to_string(m->step) + " from " +
                         Where() + ": no rank saved a rank-local entry " +
                         Quote(name));
  }
  LoadedCheckpoint out;
  CKPT_RETURN_IF_ERROR(ReadInto(*m, records, as, out));
  return out;
}

ThreadPool* CheckpointManager::Impl::IoPool() {
  if (options_.io_threads <= 1) return nullptr;
  if (!io_pool_)
    io_pool_ = std::make_unique<ThreadPool>(options_.io_threads - 1);
  return io_pool_.get();
}

void CheckpointManager::Impl::AddSlabs(BoxRead read,
                                       std::vector<BoxRead>& reads) const {
  // Slabs of whole chunks where the rows allow, so that few chunks are read
  // by two slabs, and of at least 8 MiB: a slab's chunks are read a span at
  // a time (ReadBox), and with small chunks (4 KiB, for incremental saves
  // of embedding rows) slabs of four chunks were a read per 16 KiB.
  const uint64_t bytes =
      std::max<uint64_t>(4 * options_.chunk_size, uint64_t{8} << 20);
  for (BoxRead& slab : SplitBoxRead(std::move(read), bytes)) {
    reads.push_back(std::move(slab));
  }
}

}  // namespace ckpt
