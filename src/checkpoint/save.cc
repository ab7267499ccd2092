// The save protocol, on every rank together (rank 0 is the coordinator):
//
//   1. The coordinator decides: the step must not be committed yet, unless
//      it does not load whole (then the commit replaces it: replace.h), and
//      min_seconds_between_saves may skip it. It draws the attempt id and,
//      for an incremental save, picks the parent: the newest complete
//      checkpoint below the step. The decision is broadcast,
//      so every rank acts on the same one.
//   2. Every rank offers what it holds; the offers are all-gathered and every
//      rank computes the same plan (planner.h): who writes which piece.
//   2b. The coordinator takes the root's lease unless it holds it
//      (lease.h: another live writer is waited for, then refused) and
//      broadcasts the decision it confirms: decided again under the lease
//      when it was taken just now, since the root may have changed. Not
//      before the plan: a save that cannot be planned writes nothing at
//      all, not even a lease.
//   3. Every rank writes its pieces to "step-N/rRRRRR-<attempt>.safetensors",
//      checksumming chunks as they stream out, and makes the object durable.
//      An incremental save first agrees on whether enough is unchanged to
//      reference the parent, and writes only the runs that changed.
//   3b. With the indexed layout (manifest version 3) every rank also writes
//      its chunk rows into its own index object, "step-N/rRRRRR-<attempt>
//      .ckptidx", durably, and keeps only its digest for the coordinator.
//   4. Every rank's result (its chunks or its index's digest, or its
//      error) is all-gathered.
//   5. If any rank failed, nobody commits; every rank returns that error and
//      removes the object it wrote (best effort: a crash leaves garbage).
//   6-7. The coordinator commits (commit.cc) and broadcasts the outcome;
//      every rank reads the committed manifest and returns the same result.
//
// A state with tensors on a CUDA device: in step 3 a full save reads each
// device piece through a few page-locked blocks (device_pipeline.h),
// checksumming and writing one block while the next is copied; an
// incremental or compressed one first copies the state to host memory
// (async_save.cc, Stage), since it checksums every chunk before it knows
// what to write, or compresses chunks on the I/O pool.
//
// A crash anywhere leaves the earlier checkpoints as they were, plus either
// nothing or the complete new one: without its manifest a step does not exist.
// A rank whose state is bad, or that throws, still takes part in every
// collective with an error in its message, so all ranks fail together.
#include "checkpoint/save.h"

#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

#include "checkpoint/async_save.h"
#include "checkpoint/commit.h"
#include "checkpoint/incremental.h"
#include "checkpoint/replace.h"
#include "data/writer.h"
#include "format/constants.h"
#include "staging/device_copy.h"
#include "util/log.h"
#include "util/names.h"

namespace ckpt {

using format::Manifest;

namespace {

// MakeOffer, with an exception turned into an offer that carries the error:
// a rank that throws must still take part in the collectives, or the other
// ranks would wait for it forever.
Offer SafeOffer(const State& state, const std::string& host) {
  try {
    return MakeOffer(state, host);
  } catch (const std::exception& e) {
    Offer failed;
    failed.host = host;
    failed.error_code = ErrorCode::kIOError;
    failed.error_message = std::string("building the save plan: ") + e.what();
    return failed;
  }
}

WriteResult Failed(const Status& s) {
  WriteResult r;
  r.status = s;
  return r;
}

}  // namespace

SaveDecision Saver::DecideSave(int64_t step, const SaveOptions& save) {
  auto fail = [](Status s) {
    SaveDecision d;
    d.status = std::move(s);
    return d;
  };
  const std::string op =
      "save step " + std::to_string(step) + " in " + root_.Where();
  if (step < 0) {
    return fail(InvalidArgumentError(op + ": the step is negative"));
  }
  if (step > format::kMaxStep) {
    return fail(
        InvalidArgumentError(op + ": the step does not fit in 12 digits"));
  }
  if (save.compression) {
    if (Status s = CheckCompression(*save.compression, op); !s.ok()) {
      return fail(std::move(s));
    }
  }
  Result<ObjectInfo> existing = root_.storage->Stat(format::ManifestKey(step));
  SaveDecision replacing;
  if (existing.ok()) {
    replacing = StepJudge(root_).Decide(step, *existing);
    if (!replacing.status.ok()) return replacing;
  } else if (existing.status().code() != ErrorCode::kNotFound) {
    return fail(
        existing.status().WithContext("save step " + std::to_string(step)));
  }
  if (root_.options.min_seconds_between_saves > 0) {
    // The newest step's time: known without a listing while this manager
    // knows the root (root_context.h).
    std::optional<int64_t> newest_ms;
    if (root_.known_steps && !root_.known_steps->empty()) {
      newest_ms = root_.known_steps->rbegin()->second.created_unix_ms;
    } else if (!root_.known_steps) {
      Result<std::shared_ptr<const Manifest>> newest =
          root_.manifests.NewestValid();
      if (newest.ok()) newest_ms = (*newest)->created_unix_ms;
    }
    if (newest_ms) {
      const double since = (root_.options.now_unix_ms() - *newest_ms) / 1000.0;
      if (since < root_.options.min_seconds_between_saves) {
        SaveDecision skip;
        skip.skip = true;
        return skip;
      }
    }
  }
  SaveDecision out = save.incremental ? DecideParent(step) : SaveDecision();
  out.attempt = NewAttemptId();
  out.replace = replacing.replace;
  out.replace_because = std::move(replacing.replace_because);
  return out;
}

SaveDecision Saver::ConfirmSave(int64_t step, const SaveOptions& save,
                                const SaveDecision& decided) {
  bool taken = false;
  if (Status s = root_.lease->Acquire("save", &taken); !s.ok()) {
    SaveDecision refused;
    refused.status = s.WithContext("save step " + std::to_string(step));
    return refused;
  }
  root_.saving = true;
  if (!taken) return decided;
  // Owned anew: another party may have written the root meanwhile.
  root_.known_steps.reset();
  SaveDecision again = DecideSave(step, save);
  again.attempt = decided.attempt;
  return again;
}

Status RootContext::HoldLease(std::string_view purpose, bool wait) {
  CKPT_RETURN_IF_ERROR(lease->Acquire(purpose, nullptr, wait));
  saving = true;
  return Status();
}

bool Saver::ObjectsThere(const Manifest& m) {
  std::set<int64_t> steps;
  for (const auto* list : {&m.objects, &m.metadata_objects}) {
    for (const format::ObjectRecord& o : *list) {
      int64_t s;
      std::string_view file;
      if (!format::SplitStepKey(o.key, &s, &file)) return false;
      steps.insert(s);
    }
  }
  std::map<std::string, uint64_t> sizes;
  for (int64_t s : steps) {
    Result<std::vector<ObjectInfo>> listed =
        root_.storage->List(format::StepDirName(s) + "/");
    if (!listed.ok()) return false;
    for (const ObjectInfo& o : *listed) sizes.emplace(o.key, o.size);
  }
  const std::string missing = ManifestStore::MissingObject(m, sizes);
  if (!missing.empty()) {
    LogWarning("step " + std::to_string(m.step) + " in " + root_.Where() +
               " is no parent for an incremental save: " + missing);
  }
  return missing.empty();
}

SaveDecision Saver::DecideParent(int64_t step) {
  SaveDecision full;  // a full save is always safe
  // The newest committed step below `step` that loads whole: from the
  // root as this manager knows it (root_context.h), without a listing,
  // else from one listing of the manifests and one of every object.
  std::shared_ptr<const Manifest> parent;
  if (root_.known_steps) {
    auto it = root_.known_steps->lower_bound(step);
    if (it != root_.known_steps->begin()) {
      --it;
      Result<std::shared_ptr<const Manifest>> m =
          root_.manifests.Summary(it->first);
      // Its objects are looked at still (a disk or an operator may lose
      // one behind the manager's back): the step directories it names,
      // listed, as many as its chain is long, whatever the root holds. One
      // that is not whole sends this save, and the collection after it,
      // back to the whole root.
      if (m.ok() && ObjectsThere(**m)) {
        parent = *m;
      } else {
        root_.known_steps.reset();
      }
    }
  }
  if (!root_.known_steps) {
    Result<std::vector<std::pair<int64_t, ObjectInfo>>> listed =
        root_.manifests.List();
    if (!listed.ok()) return full;
    Result<std::map<std::string, uint64_t>> sizes =
        root_.manifests.ObjectSizes();
    if (!sizes.ok()) return full;
    for (const auto& [s, info] : *listed) {
      if (s >= step) continue;
      Result<std::shared_ptr<const Manifest>> m =
          root_.manifests.Summary(s, info);
      // A parent with a missing object would pass the gap on: compare with
      // the newest complete checkpoint instead.
      if (m.ok() && ManifestStore::MissingObject(**m, *sizes).empty()) {
        parent = *m;
        break;
      }
    }
  }
  if (!parent) return full;
  const IncrementalPolicy& policy = root_.options.incremental;
  const int64_t next = parent->chain + 1;
  int64_t cap = format::kMaxDependsOn;
  if (policy.max_chain > 0) cap = std::min<int64_t>(cap, policy.max_chain);
  if (next > cap || (policy.full_every > 0 && next >= policy.full_every) ||
      parent->chunk_size != root_.options.chunk_size) {
    return full;
  }
  SaveDecision d;
  d.parent = parent->step;
  d.parent_chain = parent->chain;
  return d;
}

WriteResult Saver::WriteFull(int64_t step, const std::string& attempt,
                             const State& state, const SavePlan& plan,
                             const std::vector<size_t>& mine) {
  if (mine.empty()) return WriteResult();
  std::vector<PieceToWrite> pieces;
  std::vector<DeviceReadPipeline::Segment> device_pieces;
  for (size_t i : mine) {
    const PlannedPiece& p = plan.pieces[i];
    const PlannedEntry& e = plan.entries[p.entry];
    const Entry& entry = *state.Find(e.name);
    PieceToWrite w;
    w.tensor_name = e.name;
    w.dtype = e.dtype;
    w.lengths = p.lengths;
    w.bytes = std::span<const std::byte>(entry.tensor.data, p.bytes);
    w.on_device = !entry.tensor.location.is_host();
    if (w.on_device) device_pieces.push_back({&entry, p.bytes});
    pieces.push_back(std::move(w));
  }
  const std::string key =
      format::DataObjectKey(step, root_.comm().rank(), attempt);
  Result<WrittenObject> written =
      Guard("write " + key, [&]() -> Result<WrittenObject> {
        std::unique_ptr<DeviceReadPipeline> device;
        if (!device_pieces.empty()) {
          CKPT_ASSIGN_OR_RETURN(device, StartDeviceReads(state, device_pieces));
        }
        return WriteDataObject(*root_.storage, key, pieces,
                               root_.options.chunk_size, IsStaged(state),
                               device.get(), compress_ ? &*compress_ : nullptr);
      });
  if (!written.ok()) return Failed(written.status());
  NoteWrite(*written);
  WriteResult result;
  result.key = key;
  result.size = written->size;
  for (size_t k = 0; k < mine.size(); ++k) {
    PieceChunks& p = result.pieces.emplace_back();
    p.piece = mine[k];
    p.chunks = root_.TakeRows(k, written->chunks[k].size());
    for (const format::ChunkRecord& ch : written->chunks[k]) {
      ChunkRow& row = p.chunks.emplace_back(ch);
      row.object = kOwnObject;
    }
  }
  return result;
}

Result<std::unique_ptr<DeviceReadPipeline>> Saver::StartDeviceReads(
    const State& state, std::vector<DeviceReadPipeline::Segment> pieces) {
  constexpr std::string_view kOp = "copy from the device";
  const Entry& first = *pieces.front().entry;
  CKPT_ASSIGN_OR_RETURN(CudaDriver * cuda, DriverFor(first, kOp));
  CKPT_ASSIGN_OR_RETURN(std::span<std::byte> memory,
                        root_.bounce.Reserve(DeviceReadPipeline::kMemoryBytes));
  CKPT_RETURN_IF_ERROR(
      root_.bounce.Register(*cuda, first.tensor.location.device(), kOp));
  return DeviceReadPipeline::Start(*cuda, memory, std::move(pieces),
                                   state.cuda_stream(), std::string(kOp));
}

WriteResult Saver::WriteIncremental(int64_t step, const std::string& attempt,
                                    const State& state, const SaveOptions& save,
                                    const SavePlan& plan,
                                    const std::vector<size_t>& mine,
                                    int64_t parent) {
  Communicator& c = root_.comm();
  // A rank that cannot read the parent writes all its pieces: correct, just
  // larger. Of a version 3 parent it reads only the indexes holding pieces
  // that meet its own.
  std::vector<ManifestStore::Want> wants;
  for (size_t i : mine) {
    const PlannedPiece& p = plan.pieces[i];
    const PlannedEntry& e = plan.entries[p.entry];
    wants.push_back({e.name, e.owner, p.offsets, p.lengths});
  }
  Result<std::shared_ptr<const Manifest>> old =
      root_.manifests.ReadFor(parent, wants);
  const Manifest* base = old.ok() ? old->get() : nullptr;
  Result<IncrementalWrites> w =
      Guard("plan incremental writes", [&]() -> Result<IncrementalWrites> {
        // Its device tensors were not staged: this rank did not ask for an
        // incremental save, though the coordinator did.
        if (!IsStaged(state) && state.HasDeviceTensors()) {
          return FailedPreconditionError(
              "plan incremental writes: SaveOptions::incremental is off on "
              "this rank and on on rank 0; every rank must pass the same");
        }
        // Dirty rows say what changed since the caller's previous save; they
        // describe the parent only if that save is the parent (not when it was
        // deleted since, skipped, or made by another process).
        return PlanIncrementalWrites(
            plan, mine, state, base, root_.options.chunk_size, c.size(),
            save.dirty_rows, parent == root_.last_saved_step);
      });
  // Every rank learns what all could reference, so all drop the references
  // together when too little is unchanged.
  ReferenceStats own;
  if (w.ok()) own = {w->referenced_bytes, w->total_bytes};
  Result<std::vector<std::string>> stats =
      c.AllGather(EncodeReferenceStats(own));
  if (!stats.ok()) return Failed(stats.status());
  if (!w.ok()) return Failed(w.status());
  uint64_t referenced = 0, total = 0;
  for (const std::string& bytes : *stats) {
    Result<ReferenceStats> st = DecodeReferenceStats(bytes);
    if (!st.ok()) return Failed(st.status());
    referenced += st->referenced;
    total += st->total;
  }
  if (static_cast<double>(referenced) <
      root_.options.incremental.min_referenced_fraction *
          static_cast<double>(total)) {
    w = PlanIncrementalWrites(plan, mine, state, nullptr,
                              root_.options.chunk_size, c.size(), {}, false);
    if (!w.ok()) return Failed(w.status());
  }
  WriteResult result;
  std::optional<WrittenObject> written;
  if (!w->runs.empty()) {
    const std::string key = format::DataObjectKey(step, c.rank(), attempt);
    Result<WrittenObject> r = Guard("write " + key, [&] {
      return WriteDataObject(*root_.storage, key, w->runs,
                             root_.options.chunk_size, IsStaged(state), nullptr,
                             compress_ ? &*compress_ : nullptr);
    });
    if (!r.ok()) return Failed(r.status());
    NoteWrite(*r);
    written = std::move(r).value();
    result.key = key;
    result.size = written->size;
  }
  // Referenced objects are listed once; a row names one by its index. Runs
  // of chunks in one parent object are the rule, so the last one found is
  // tried before the map.
  std::unordered_map<uint32_t, uint32_t> ref_index;  // parent's -> refs
  uint32_t last_object = UINT32_MAX, last_ref = 0;
  result.pieces.reserve(mine.size());
  for (size_t k = 0; k < mine.size(); ++k) {
    PieceChunks& piece = result.pieces.emplace_back();
    piece.piece = mine[k];
    piece.chunks = root_.TakeRows(k, w->slots[k].size());
    for (const ChunkSlot& slot : w->slots[k]) {
      if (slot.ref) {
        const format::ChunkRecord& ch = *slot.ref;
        if (ch.object != last_object) {
          auto [it, added] = ref_index.try_emplace(
              ch.object, static_cast<uint32_t>(result.refs.size()));
          if (added) {
            const format::ObjectRecord& o = base->objects[ch.object];
            result.refs.push_back(ObjectRef{o.key, o.size, o.rank});
          }
          last_object = ch.object;
          last_ref = it->second;
        }
        ChunkRow& row = piece.chunks.emplace_back(ch);
        row.object = last_ref;
      } else {
        const format::ChunkRecord& ch = written->chunks[slot.run][slot.index];
        ChunkRow& row = piece.chunks.emplace_back(ch);
        row.object = kOwnObject;
      }
    }
  }
  // The parent's rows, read for this save only, hold the next one's.
  if (old.ok())
    root_.spare_rows = ManifestStore::RecycleRows(std::move(old).value());
  return result;
}

int64_t RootContext::SteadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Result<std::vector<WriteResult>> Saver::GatherResults(WriteResult mine) {
  std::vector<WriteResult> results;
  // A single rank keeps its own: with small chunks the result holds a row
  // per chunk, and encoding it only to decode it again is wasted time.
  if (root_.comm().size() == 1) {
    results.push_back(std::move(mine));
    return results;
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> gathered,
                        root_.comm().AllGather(EncodeWriteResult(mine)));
  for (size_t r = 0; r < gathered.size(); ++r) {
    Result<WriteResult> decoded = DecodeWriteResult(gathered[r]);
    if (!decoded.ok()) {
      return decoded.status().WithContext("rank " + std::to_string(r));
    }
    results.push_back(std::move(decoded).value());
  }
  return results;
}

void Saver::DiscardAttempt(const std::string& key) {
  if (key.empty()) return;
  // Best effort: what stays behind is garbage a collection removes.
  if (Status s = root_.storage->Delete(key);
      !s.ok() && s.code() != ErrorCode::kNotFound) {
    LogWarning("could not remove " + key +
               " of a failed save: " + s.ToString());
  }
}

Result<SaveResult> Saver::Save(int64_t step, const State& state,
                               const SaveOptions& save,
                               const Status& state_error) {
  const std::string op =
      "save step " + std::to_string(step) + " in " + root_.Where();
  // An incremental or compressed save of a state with tensors on a device
  // is saved from a copy in the staging memory, page-locked, as an
  // asynchronous save is: the one checksums the bytes before it knows which
  // to write, the other compresses host chunks on the I/O pool. A full raw
  // save streams them through the bounce blocks instead (WriteFull). A
  // rank whose copy fails still takes part, with the error.
  if (state_error.ok() && !IsStaged(state) && state.HasDeviceTensors() &&
      (save.incremental || MayCompress(save))) {
    const Status staged =
        Stage(root_, state, StagingBytes(state), "stage the state");
    return Save(step, root_.staged, save, staged);
  }
  // A save that fails may leave objects behind (a discard can fail too):
  // the coordinator no longer knows the root without looking.
  struct ForgetUnlessSaved {
    RootContext& root;
    bool saved = false;
    ~ForgetUnlessSaved() {
      if (!saved) root.known_steps.reset();
    }
  } forget{root_};
  Communicator& c = root_.comm();
  root_.save_started_ms = RootContext::SteadyNowMs();
  // 1. The coordinator decides.
  std::string decision_bytes;
  if (c.rank() == 0) {
    SaveDecision decided = DecideSave(step, save);
    decided.step = step;
    decision_bytes = EncodeSaveDecision(decided);
  }
  CKPT_ASSIGN_OR_RETURN(decision_bytes, c.Broadcast(decision_bytes, 0));
  CKPT_ASSIGN_OR_RETURN(SaveDecision decision,
                        DecodeSaveDecision(decision_bytes));
  CKPT_RETURN_IF_ERROR(decision.status);
  // A rank whose step counter drifted would write its objects under
  // another step than the manifest's: the save fails on every rank (as its
  // offer's error, below) and nothing is committed.
  Status error = state_error;
  if (error.ok() && decision.step != step) {
    error = InvalidArgumentError(
        "the ranks disagree on the step: rank " + std::to_string(c.rank()) +
        " saves step " + std::to_string(step) + ", rank 0 step " +
        std::to_string(decision.step) + "; nothing is saved");
  }
  if (decision.skip) {
    forget.saved = true;
    SaveResult skipped;
    skipped.skipped = true;
    return skipped;
  }

  // A diverged loss must not cost the job its checkpoint: a metric that is
  // not finite is left out of the manifest (which records numbers JSON
  // can hold, commit.cc), and said so once; keep_best does not rank this
  // step by it.
  for (const auto& [k, v] : save.metrics) {
    if (c.rank() == 0 && !std::isfinite(v)) {
      const char* what = std::isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf";
      LogWarning(op + ": metric " + Quote(k) + " is " + what +
                 ", not recorded (a manifest holds finite numbers; "
                 "keep_best does not rank this step by it)");
    }
  }

  // 2. Plan.
  Offer offer = SafeOffer(state, c.host_name());
  if (!error.ok()) {
    offer = Offer{c.host_name(), error.code(), error.message(), {}};
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> offers,
                        c.AllGather(EncodeOffer(offer)));
  std::vector<Offer> decoded;
  for (const std::string& o : offers) {
    CKPT_ASSIGN_OR_RETURN(Offer offer, DecodeOffer(o));
    decoded.push_back(std::move(offer));
  }
  Result<SavePlan> planned = MakePlan(decoded);
  if (!planned.ok()) return planned.status().WithContext(op);
  const SavePlan& plan = *planned;

  // 2b. Own the root, then confirm the decision.
  std::string confirmed;
  if (c.rank() == 0) {
    confirmed = EncodeSaveDecision(ConfirmSave(step, save, decision));
  }
  CKPT_ASSIGN_OR_RETURN(confirmed, c.Broadcast(confirmed, 0));
  CKPT_ASSIGN_OR_RETURN(decision, DecodeSaveDecision(confirmed));
  CKPT_RETURN_IF_ERROR(decision.status);
  if (decision.skip) {
    SaveResult skipped;
    skipped.skipped = true;
    return skipped;
  }

  // 3. Write this rank's pieces (the coordinator summarizes a large plan
  // for its directory meanwhile).
  const bool indexed =
      root_.options.metadata_layout == Options::MetadataLayout::kIndexed;
  PendingDirectoryEntries entries;
  if (indexed && c.rank() == 0) entries.Start(plan);
  std::vector<size_t> mine;
  for (size_t i = 0; i < plan.pieces.size(); ++i) {
    if (plan.pieces[i].writer == c.rank()) mine.push_back(i);
  }
  compress_ = ChooseCompression(state, save);
  const int64_t write_started_ms = RootContext::SteadyNowMs();
  WriteResult written =
      decision.parent >= 0
          ? WriteIncremental(step, decision.attempt, state, save, plan, mine,
                             decision.parent)
          : WriteFull(step, decision.attempt, state, plan, mine);

  // 3b. Version 3: every rank writes its own index, in parallel.
  if (indexed) WriteIndex(step, decision.attempt, plan, written);
  written.wait_ms = write_started_ms - root_.save_started_ms;
  written.write_ms = RootContext::SteadyNowMs() - write_started_ms;

  // 4. Gather the results; 5. any failure fails every rank, and each
  // removes what it wrote: nothing can commit this attempt any more.
  const std::string own_object = written.key;
  const std::string own_index =
      written.indexed ? format::IndexObjectKey(step, c.rank(), decision.attempt)
                      : std::string();
  Result<std::vector<WriteResult>> results = GatherResults(std::move(written));
  if (!results.ok()) return results.status().WithContext(op);
  for (size_t r = 0; r < results->size(); ++r) {
    Status s = (*results)[r].status;
    if (s.ok()) continue;
    if (c.size() > 1) s = s.WithContext("rank " + std::to_string(r));
    DiscardAttempt(own_object);
    DiscardAttempt(own_index);
    return s.WithContext(op);
  }

  // 6-7. The coordinator commits; everyone returns its outcome.
  std::string outcome_bytes;
  if (c.rank() == 0) {
    SaveOutcome outcome;
    Result<SaveOutcome> committed =
        Guard("commit", [&]() -> Result<SaveOutcome> {
          return Committer(root_).Commit(step, save, decision, plan, *results,
                                         entries);
        });
    outcome = committed.ok() ? std::move(committed).value()
                             : SaveOutcome{committed.status(), {}, false};
    outcome_bytes = EncodeSaveOutcome(outcome);
  }
  CKPT_ASSIGN_OR_RETURN(outcome_bytes, c.Broadcast(outcome_bytes, 0));
  CKPT_ASSIGN_OR_RETURN(SaveOutcome outcome, DecodeSaveOutcome(outcome_bytes));
  if (!outcome.status.ok()) {
    if (outcome.discard) {
      DiscardAttempt(own_object);
      DiscardAttempt(own_index);
    }
    return outcome.status;
  }
  // Every rank returns the committed checkpoint as the coordinator wrote
  // it: nothing is read back, so nothing can fail after the commit.
  SaveResult out;
  out.info = std::move(outcome.info);
  out.replaced = decision.replace;
  out.replaced_because = std::move(decision.replace_because);
  root_.last_saved_step = step;
  out.deleted_steps = std::move(outcome.deleted_steps);
  forget.saved = true;
  return out;
}

}  // namespace ckpt
