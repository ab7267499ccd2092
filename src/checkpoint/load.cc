// Loading, on every rank (any number of ranks, any split). A load either
// completes at one step or changes nothing; a resume lands on the newest
// step that loads whole.
//
//   1. The steps to try: the one asked for, or (a resume) every committed
//      one, newest first. With many ranks, rank 0 lists and broadcasts, so
//      ranks racing a concurrent commit never try different steps.
//   2. For each step, each rank on its own (StageLoad): read the manifest
//      (of a version 3 checkpoint the commit record, the directory and only
//      the indexes of the ranks whose pieces meet the boxes it loads); match
//      the state against it (every entry present with the same kind, dtype
//      and global shape, views writable, rank-local entries only at the
//      saving world size, no extras under `strict`); check that every
//      object the needed chunks lie in exists with its recorded size; with
//      many ranks, share the reads (read_once.h: a chunk several ranks need
//      is read by one and sent to the others; every rank takes part, even
//      one whose checks failed); then
//      read: blobs and metadata into memory of the load's own, tensors as
//      the chunks that meet this rank's box, in slabs on the I/O pool, each
//      chunk checked against its checksum. Transactional (the default),
//      host tensors from a storage with object views (file://, mem://) are
//      checked in place in the objects' views and not yet copied
//      (viewed_reads.h), unless they are not in the page cache of a disk
//      (then into the staging memory, step 4); from any other storage every
//      tensor is read into the staging memory. Streaming, host tensors are
//      read straight into their buffers. Device tensors always go through the
//      staging memory, page-locked.
//   3. The ranks all-gather their outcomes (LoadVote). All whole: each rank
//      applies its load (ApplyLoad: device copies, one ParallelCopy from
//      the staging memory into the host tensors, the copy of the checked
//      bytes out of the views, blobs and metadata), and
//      the load is done. A failure that is not damage (the state does not
//      fit the checkpoint, the storage failed) fails every rank at once. A
//      damaged step (DataLoss anywhere, or a manifest gone) fails an
//      explicit load; a resume logs it and tries the next older step, and
//      fails, naming every step tried, when none is left.
//
// The cost of the promise: from views, one more pass over the bytes in
// memory (checked, then copied); otherwise staging memory of this rank's
// loaded tensor bytes, kept by the manager and reused (as SaveAsync's is),
// and one more copy of those bytes. LoadOptions::transactional = false
// reads host tensors in place instead; its failures name the entries they
// may have changed. LoadAll and LoadRankLocal fill a State of their own, so
// they change nothing of the caller's either way; they fall back as Load does.
#include "checkpoint/load.h"

#include <algorithm>
#include <future>
#include <set>

#include "checkpoint/read_once.h"
#include "checkpoint/replace.h"
#include "staging/staging.h"
#include "util/dtype_text.h"
#include "util/log.h"
#include "util/names.h"

namespace ckpt {

using format::Manifest;

namespace {

// Where `reads` land: faulted in ahead of them where that is new memory.
std::vector<std::span<std::byte>> DestinationsOf(
    const std::vector<BoxRead>& reads) {
  std::vector<std::span<std::byte>> out;
  for (const BoxRead& r : reads) out.push_back(r.dest);
  return out;
}

std::span<std::byte> BytesOf(std::string& s) {
  return std::span<std::byte>(reinterpret_cast<std::byte*>(s.data()), s.size());
}

}  // namespace

Result<int64_t> Loader::ResolveStep(std::optional<int64_t> step) {
  if (step) return *step;
  if (root_.comm().size() == 1) {
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> newest,
                          root_.manifests.NewestComplete());
    return newest->step;
  }
  std::string mine;
  if (root_.comm().rank() == 0) {
    Result<std::shared_ptr<const Manifest>> m =
        root_.manifests.NewestComplete();
    mine = EncodeLoadSteps(m.ok() ? LoadSteps{Status(), {(*m)->step}}
                                  : LoadSteps{m.status(), {}});
  }
  CKPT_ASSIGN_OR_RETURN(std::string agreed, root_.comm().Broadcast(mine, 0));
  CKPT_ASSIGN_OR_RETURN(LoadSteps resolved, DecodeLoadSteps(agreed));
  CKPT_RETURN_IF_ERROR(resolved.status);
  return resolved.steps.front();
}

Result<std::vector<int64_t>> Loader::StepsToTry(std::optional<int64_t> step) {
  if (step) return std::vector<int64_t>{*step};
  auto newest_first = [&]() -> Result<std::vector<int64_t>> {
    CKPT_ASSIGN_OR_RETURN(auto listed, root_.manifests.List());
    if (listed.empty()) {
      return NotFoundError("no committed checkpoint in " + root_.Where());
    }
    std::vector<int64_t> steps;
    for (const auto& [s, info] : listed) steps.push_back(s);
    return steps;
  };
  if (root_.comm().size() == 1) return newest_first();
  std::string mine;
  if (root_.comm().rank() == 0) {
    Result<std::vector<int64_t>> steps = newest_first();
    mine = EncodeLoadSteps(steps.ok() ? LoadSteps{Status(), *steps}
                                      : LoadSteps{steps.status(), {}});
  }
  CKPT_ASSIGN_OR_RETURN(std::string agreed, root_.comm().Broadcast(mine, 0));
  CKPT_ASSIGN_OR_RETURN(LoadSteps steps, DecodeLoadSteps(agreed));
  CKPT_RETURN_IF_ERROR(steps.status);
  return steps.steps;
}

namespace {

// Every rank's vote as one: the first rank's failure that is not damage
// (every rank fails with it), else the first rank's damage, else success.
Result<LoadVote> Agree(const std::vector<std::string>& votes) {
  LoadVote damaged;
  for (size_t r = 0; r < votes.size(); ++r) {
    CKPT_ASSIGN_OR_RETURN(LoadVote v, DecodeLoadVote(votes[r]));
    if (v.status.ok()) continue;
    v.status = v.status.WithContext("rank " + std::to_string(r));
    if (!v.damaged) return v;
    if (damaged.status.ok()) damaged = std::move(v);
  }
  return damaged;
}

}  // namespace

Result<int64_t> Loader::FirstStepThatLoads(
    std::optional<int64_t> step,
    const std::function<Status(int64_t, bool& damaged)>& attempt,
    bool* damaged_out, bool agree_explicit) {
  CKPT_ASSIGN_OR_RETURN(std::vector<int64_t> steps, StepsToTry(step));
  std::string tried;
  int relisted = 0;
  for (size_t i = 0; i < steps.size();) {
    const int64_t s = steps[i++];
    bool damaged = false;
    Status mine = attempt(s, damaged);
    LoadVote vote{mine, !mine.ok() && damaged};
    // No rank changes its state before every rank has read and checked
    // its part whole.
    if (root_.comm().size() > 1 && (!step || agree_explicit)) {
      CKPT_ASSIGN_OR_RETURN(std::vector<std::string> all,
                            root_.comm().AllGather(EncodeLoadVote(vote)));
      CKPT_ASSIGN_OR_RETURN(vote, Agree(all));
    }
    if (vote.status.ok()) return s;
    // A step deleted since the listing (the retention of a job saving
    // beside this resume, gc, `ckpt delete`) is no damage, and the newest
    // step may be newer now: list again and start over. Every rank takes
    // the same turn (the vote is agreed; the listing is rank 0's).
    if (!step && vote.status.code() == ErrorCode::kNotFound &&
        relisted < kResumeMostRelistings) {
      CKPT_ASSIGN_OR_RETURN(std::vector<int64_t> now, StepsToTry(step));
      if (std::find(now.begin(), now.end(), s) == now.end()) {
        ++relisted;
        LogInfo("resume from " + root_.Where() + ": step " + std::to_string(s) +
                " was deleted while it loaded (" + vote.status.ToString() +
                "); listing the steps again");
        steps = std::move(now);
        i = 0;
        continue;
      }
    }
    if (damaged_out != nullptr) *damaged_out = vote.damaged;
    // A save of this step replaces it then without reading it all again.
    if (std::optional<ObjectInfo> seen = root_.manifests.LastSeen(s);
        seen && vote.damaged) {
      StepJudge(root_).Note(s, *seen, vote.status.ToString());
    }
    if (step || !vote.damaged) return vote.status;
    if (root_.comm().rank() == 0) {
      LogWarning("resume from " + root_.Where() + ": skipping step " +
                 std::to_string(s) + ", which does not load whole (" +
                 vote.status.ToString() + "); trying an older step");
    }
    tried += (tried.empty() ? "" : "; ") + std::string("step ") +
             std::to_string(s) + ": " + vote.status.ToString();
  }
  return DataLossError("resume from " + root_.Where() +
                       ": no committed step loads whole (tried " + tried + ")");
}

Result<std::shared_ptr<const Manifest>> Loader::ReadFor(int64_t step,
                                                        const State& state) {
  // The boxes this rank loads: of a version 3 checkpoint it reads only the
  // indexes whose pieces meet them.
  std::vector<ManifestStore::Want> wants;
  for (const Entry& e : state.entries()) {
    if (e.kind == EntryKind::kMetadata) continue;
    ManifestStore::Want& w = wants.emplace_back();
    w.name = e.name;
    w.owner = e.rank_local ? root_.comm().rank() : -1;
    if (e.kind == EntryKind::kTensor && e.is_piece()) {
      w.offsets = e.offsets;
      w.lengths = e.tensor.shape;
    }
  }
  return root_.manifests.ReadFor(step, wants);
}

Result<std::vector<const format::EntryRecord*>> Loader::MatchEntries(
    const Manifest& m, const State& state, const LoadOptions& load,
    const std::string& op) {
  const int rank = root_.comm().rank();
  std::vector<const format::EntryRecord*> records;
  for (const Entry& e : state.entries()) {
    const format::EntryRecord* rec;
    if (e.rank_local) {
      if (m.world_size != root_.comm().size()) {
        return FailedPreconditionError(
            op + ": entry " + Quote(e.name) +
            " is rank-local and was saved by " + std::to_string(m.world_size) +
            " ranks, but " + std::to_string(root_.comm().size()) +
            (root_.comm().size() == 1 ? " rank loads" : " ranks load") +
            " it; use LoadRankLocal (Python: load_rank_local) to get every "
            "rank's value and merge them");
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

bool ResumeSkips(const Status& s) {
  return s.code() == ErrorCode::kDataLoss || s.code() == ErrorCode::kNotFound;
}

namespace {

std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) {
    out += (out.empty() ? "" : ", ") + Quote(n);
  }
  return out;
}

}  // namespace

Result<CheckpointInfo> Loader::Load(std::optional<int64_t> step, State& state,
                                    const LoadOptions& load, bool* damaged) {
  // A state that cannot be loaded into is refused before any step is looked
  // for.
  CKPT_RETURN_IF_ERROR(state.status());
  // Staging memory this load mapped is offered for huge pages once done
  // with (staging.h), or unmapped if over the manager's bound.
  struct OfferWhenDone {
    StagingArena& arena;
    uint64_t bound;
    ~OfferWhenDone() { arena.KeepAtMost(bound), arena.OfferForHugePages(); }
  } offer{root_.staging, root_.options.async_staging_bytes};
  StagedLoad staged;
  std::vector<std::string> changed;  // streaming: written before a failure
  Result<int64_t> loaded = FirstStepThatLoads(
      step,
      [&](int64_t s, bool& damaged) {
        staged = StagedLoad();
        const Status read = StageLoad(s, state, load, staged, damaged);
        for (const auto& [name, at] : staged.written) {
          if (std::find(changed.begin(), changed.end(), name) ==
              changed.end()) {
            changed.push_back(name);
          }
        }
        return read;
      },
      damaged);
  if (!loaded.ok()) {
    if (changed.empty()) return loaded.status();
    return Status(
        loaded.status().code(),
        loaded.status().message() +
            "; entries changed before the failure: " + Joined(changed));
  }
  CKPT_RETURN_IF_ERROR(ApplyLoad(staged, state));
  return InfoFromManifest(*staged.manifest);
}

Status Loader::StageLoad(int64_t step, State& state, const LoadOptions& load,
                         StagedLoad& out, bool& damaged) {
  damaged = false;
  std::vector<const format::EntryRecord*> records;
  Status planned = PlanStage(step, state, load, out, records, damaged);
  if (!ReadOnceWanted(load, root_.comm(), *root_.storage)) {
    CKPT_RETURN_IF_ERROR(planned);
    return ReadStage(state, load, records, *root_.storage, out, damaged);
  }
  // Every byte read once (read_once.h): the ranks share their plans, even
  // one that failed, so that no rank waits on it.
  std::vector<NeededChunk> needed;
  if (planned.ok()) {
    planned = NeededChunks(state, records, needed);
    damaged = planned.code() == ErrorCode::kDataLoss;
  }
  Result<SharedReads> shared =
      ShareReads(root_.comm(), *root_.storage, load.read_once, *out.manifest,
                 planned.ok() ? &needed : nullptr, root_.IoPool());
  CKPT_RETURN_IF_ERROR(planned);
  const std::string op =
      "load step " + std::to_string(step) + " from " + root_.Where();
  CKPT_RETURN_IF_ERROR_CTX(shared.status(), op);
  if (shared->another_failed) {
    // That rank's vote fails the step; this one has read nothing.
    out.incomplete = true;
    return Status();
  }
  out.held = shared->storage;
  Storage& from = shared->storage ? *shared->storage : *root_.storage;
  return ReadStage(state, load, records, from, out, damaged);
}

Status Loader::NeededChunks(
    const State& state, const std::vector<const format::EntryRecord*>& records,
    std::vector<NeededChunk>& out) {
  const std::vector<Entry>& entries = state.entries();
  for (size_t i = 0; i < records.size(); ++i) {
    const format::EntryRecord& rec = *records[i];
    const Entry& e = entries[i];
    if (rec.kind == EntryKind::kMetadata) continue;
    const bool piece = rec.kind == EntryKind::kTensor && e.is_piece();
    CKPT_RETURN_IF_ERROR(AddNeededChunks(
        rec, piece ? e.offsets : std::vector<int64_t>(rec.shape.size(), 0),
        piece ? e.tensor.shape : rec.shape, out));
  }
  return Status();
}

Status Loader::PlanStage(int64_t step, State& state, const LoadOptions& load,
                         StagedLoad& out,
                         std::vector<const format::EntryRecord*>& records,
                         bool& damaged) {
  CKPT_RETURN_IF_ERROR(state.status());
  // 1. The manifest, with the pieces this rank's boxes meet.
  Result<std::shared_ptr<const Manifest>> read = ReadFor(step, state);
  if (!read.ok()) {
    damaged = ResumeSkips(read.status());
    return read.status();
  }
  out.manifest = *read;
  const Manifest& m = **read;
  const std::string op =
      "load step " + std::to_string(m.step) + " from " + root_.Where();
  // 2-3. Everything that can be checked without reading data is checked
  // before the first byte is read.
  CKPT_ASSIGN_OR_RETURN(records, MatchEntries(m, state, load, op));
  if (Status objects = CheckObjects(m, records); !objects.ok()) {
    damaged = objects.code() == ErrorCode::kDataLoss;
    return objects;
  }
  return Status();
}

Status Loader::ReadStage(State& state, const LoadOptions& load,
                         const std::vector<const format::EntryRecord*>& records,
                         Storage& from, StagedLoad& out, bool& damaged) {
  const Manifest& m = *out.manifest;
  const std::string op =
      "load step " + std::to_string(m.step) + " from " + root_.Where();
  // 4. Where each tensor is read to (the records follow the state's
  // entries): the staging memory (device tensors always; transactional
  // ones below), each on a page of its own, as large staged entries are;
  // or its own buffer: streaming at once, from views only after every
  // chunk is checked in place (viewed_reads.h).
  constexpr uint64_t kPage = 4096;
  constexpr uint64_t kInPlace = UINT64_MAX;
  const std::vector<Entry>& entries = state.entries();
  const bool viewed =
      load.transactional && ChecksInViews(state, records, from, m);
  std::vector<uint64_t> at(records.size(), kInPlace);
  uint64_t used = 0;
  bool staged = false;
  for (size_t i = 0; i < records.size(); ++i) {
    const Entry& e = entries[i];
    if (e.kind != EntryKind::kTensor) continue;
    if ((viewed || !load.transactional) && e.tensor.location.is_host()) {
      continue;
    }
    at[i] = used;
    used = (used + *e.tensor.ByteSize() + kPage - 1) / kPage * kPage;
    staged = true;
  }
  std::byte* memory = nullptr;
  if (staged) {
    CKPT_ASSIGN_OR_RETURN(std::span<std::byte> reserved,
                          root_.staging.ReserveForReads(std::max(used, kPage)));
    memory = reserved.data();
  }
  // Page-locking the staging memory (a first device load) pins every page,
  // as long as a fifth of the reads on a GPU machine (docs/gpu.md): beside
  // them, waited for before the load is staged.
  std::future<Status> registering;
  if (const Entry* first = FirstDeviceTensor(state)) {
    CKPT_ASSIGN_OR_RETURN(out.cuda, DriverFor(*first, op));
    if (!root_.staging.registered()) {
      registering = std::async(
          std::launch::async,
          [this, cuda = out.cuda, device = first->tensor.location.device(),
           &op] { return root_.staging.Register(*cuda, device, op); });
    }
  }
  // 5. Read: blobs and metadata into the staged load, tensors in parallel
  // at the end, every chunk checked against its checksum.
  std::vector<BoxRead> reads;
  std::vector<std::pair<std::string, uint64_t>> in_place;
  for (size_t i = 0; i < records.size(); ++i) {
    const format::EntryRecord* rec = records[i];
    const Entry& e = entries[i];
    switch (rec->kind) {
      case EntryKind::kTensor: {
        const uint64_t bytes = *e.tensor.ByteSize();
        std::byte* into = e.tensor.data;
        if (at[i] == kInPlace && viewed) {
          AddSlabs(BoxOf(rec, e, {into, bytes}), out.copies);
          break;
        }
        if (at[i] == kInPlace) {
          in_place.emplace_back(e.name, bytes);
        } else {
          into = memory + at[i];
          if (!e.tensor.location.is_host()) {
            out.to_devices.push_back(DeviceCopy{&e, into});
          } else if (bytes > 0) {
            out.to_host.push_back(CopyJob{e.tensor.data, into, bytes});
          }
        }
        AddSlabs(BoxOf(rec, e, {into, bytes}), reads);
        break;
      }
      case EntryKind::kBlob: {
        std::string bytes(static_cast<size_t>(rec->shape[0]), '\0');
        if (Status s = ReadEntry(from, m, *rec, BytesOf(bytes)); !s.ok()) {
          damaged = s.code() == ErrorCode::kDataLoss;
          return s.WithContext(op);
        }
        out.blobs.emplace_back(rec->name, std::move(bytes));
        break;
      }
      case EntryKind::kMetadata:
        out.metadata.emplace_back(rec->name, rec->json);
        break;
    }
  }
  out.written = std::move(in_place);
  // A streaming load into new memory (Python's load() into arrays of its
  // own, a job's untouched tensors): faulted in ahead of the reads. The
  // staging memory is faulted in by ReserveForReads.
  const FaultAhead ahead(load.transactional
                             ? std::vector<std::span<std::byte>>()
                             : DestinationsOf(reads));
  if (Status s = ReadBoxes(from, m, reads, root_.IoPool()); !s.ok()) {
    damaged = s.code() == ErrorCode::kDataLoss;
    return s.WithContext(op);
  }
  if (!out.copies.empty()) {
    out.viewed = std::make_shared<ViewedReads>(&from);
    if (Status s = out.viewed->Check(m, out.copies, root_.IoPool()); !s.ok()) {
      damaged = s.code() == ErrorCode::kDataLoss;
      return s.WithContext(op);
    }
  }
  if (registering.valid()) return registering.get();
  return Status();
}

Status Loader::ApplyLoad(StagedLoad& staged, State& state) {
  if (staged.incomplete) {
    return FailedPreconditionError(
        "load: applying a load that another rank failed");
  }
  const std::string op = "load step " + std::to_string(staged.manifest->step) +
                         " from " + root_.Where();
  // The devices first: the copy that can fail (a device error) goes before
  // the ones that cannot.
  if (!staged.to_devices.empty()) {
    CKPT_RETURN_IF_ERROR(CopyToDevices(*staged.cuda, staged.to_devices,
                                       state.cuda_stream(), op));
  }
  CKPT_RETURN_IF_ERROR_CTX(ParallelCopy(staged.to_host), op);
  if (staged.viewed != nullptr) {
    // The bytes were checked in place; this copy fails only if an object
    // was rewritten in place since, which ckpt never does.
    CKPT_RETURN_IF_ERROR_CTX(
        staged.viewed->Copy(*staged.manifest, staged.copies, root_.IoPool()),
        op);
    staged.viewed.reset();
    staged.held.reset();
  }
  for (auto& [name, bytes] : staged.blobs) {
    CKPT_RETURN_IF_ERROR(state.SetBlob(name, std::move(bytes)));
  }
  for (auto& [name, json] : staged.metadata) {
    CKPT_RETURN_IF_ERROR(state.SetMetadataJson(name, std::move(json)));
  }
  return Status();
}

Status Loader::ReadInto(const Manifest& m,
                        const std::vector<const format::EntryRecord*>& records,
                        const std::vector<std::string>& names,
                        LoadedCheckpoint& out) {
  const std::string op =
      "load step " + std::to_string(m.step) + " from " + root_.Where();
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
        CKPT_RETURN_IF_ERROR_CTX(
            ReadEntry(*root_.storage, m, *rec, BytesOf(bytes)), op);
        out.state.AddBlob(names[i], std::move(bytes));
        break;
      }
      case EntryKind::kMetadata:
        out.state.AddMetadataJson(names[i], rec->json);
        break;
    }
  }
  // The new memory, faulted in ahead of the reads.
  const FaultAhead ahead(DestinationsOf(reads));
  CKPT_RETURN_IF_ERROR_CTX(ReadBoxes(*root_.storage, m, reads, root_.IoPool()),
                           op);
  return out.state.status();
}

Result<LoadedCheckpoint> Loader::LoadAll(
    std::optional<int64_t> step, const std::vector<std::string>& names) {
  LoadedCheckpoint out;
  CKPT_RETURN_IF_ERROR(
      FirstStepThatLoads(
          step,
          [&](int64_t s, bool& damaged) -> Status {
            out = LoadedCheckpoint();
            Result<std::shared_ptr<const Manifest>> m = root_.manifests.Read(s);
            if (!m.ok()) {
              damaged = ResumeSkips(m.status());
              return m.status();
            }
            const std::string op =
                "load step " + std::to_string(s) + " from " + root_.Where();
            std::vector<const format::EntryRecord*> records;
            std::vector<std::string> as;
            if (names.empty()) {
              for (const auto& rec : (*m)->entries) {
                records.push_back(&rec);
                as.push_back(rec.owner < 0
                                 ? rec.name
                                 : RankLocalName(rec.name, rec.owner));
              }
            } else {
              for (const std::string& n : names) {
                const format::EntryRecord* rec = (*m)->Find(n);
                if (rec == nullptr) {
                  return NotFoundError(op + ": the checkpoint has no entry " +
                                       Quote(n));
                }
                records.push_back(rec);
                as.push_back(n);
              }
            }
            const Status read = ReadInto(**m, records, as, out);
            damaged = read.code() == ErrorCode::kDataLoss;
            return read;
          },
          /*damaged=*/nullptr, /*agree_explicit=*/false)
          .status());
  return out;
}

Result<LoadedCheckpoint> Loader::LoadRankLocal(std::optional<int64_t> step,
                                               std::string_view name) {
  LoadedCheckpoint out;
  CKPT_RETURN_IF_ERROR(
      FirstStepThatLoads(
          step,
          [&](int64_t s, bool& damaged) -> Status {
            out = LoadedCheckpoint();
            Result<std::shared_ptr<const Manifest>> m = root_.manifests.Read(s);
            if (!m.ok()) {
              damaged = ResumeSkips(m.status());
              return m.status();
            }
            std::vector<const format::EntryRecord*> records;
            std::vector<std::string> as;
            for (int32_t r = 0; r < (*m)->world_size; ++r) {
              if (const format::EntryRecord* rec = (*m)->FindLocal(name, r)) {
                records.push_back(rec);
                as.push_back(std::to_string(r));
              }
            }
            if (records.empty()) {
              return NotFoundError(
                  "load step " + std::to_string(s) + " from " + root_.Where() +
                  ": no rank saved a rank-local entry " + Quote(name));
            }
            const Status read = ReadInto(**m, records, as, out);
            damaged = read.code() == ErrorCode::kDataLoss;
            return read;
          },
          /*damaged=*/nullptr, /*agree_explicit=*/false)
          .status());
  return out;
}

ThreadPool* RootContext::IoPool() {
  if (options.io_threads <= 1) return nullptr;
  if (!io_pool) io_pool = std::make_unique<ThreadPool>(options.io_threads - 1);
  return io_pool.get();
}

void Loader::AddSlabs(BoxRead read, std::vector<BoxRead>& reads) const {
  // Slabs of whole chunks where the rows allow, so that few chunks are read
  // by two slabs, and of at least 8 MiB: a slab's chunks are read a span at
  // a time (ReadBox), and with small chunks (4 KiB, for incremental saves
  // of embedding rows) slabs of four chunks were a read per 16 KiB.
  const uint64_t bytes =
      std::max<uint64_t>(4 * root_.options.chunk_size, uint64_t{8} << 20);
  for (BoxRead& slab : SplitBoxRead(std::move(read), bytes)) {
    reads.push_back(std::move(slab));
  }
}

}  // namespace ckpt
