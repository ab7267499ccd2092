// The commit, on the coordinator, once every rank's data object is durable
// (save.cc steps 1-5):
//
//   6. Build the manifest from the plan and every rank's chunk rows: the
//      objects written in this attempt, then (incremental) the parent's
//      objects that rows reference, whose steps become depends_on. Validate
//      it as a reader would, check that every referenced object of an
//      earlier step still exists with its size (a delete may have removed
//      the parent meanwhile: then nothing is committed), and write it as
//      step-N/MANIFEST.json with create-if-absent (checking first where the
//      store cannot refuse an existing object). That write is the commit;
//      losing the race to another commit of the step is AlreadyExists. A
//      save that replaces a step that does not load whole (replace.h)
//      overwrites its manifest instead, in one atomic write. If the
//      commit certainly did not happen, the outcome tells every rank to remove
//      the object it wrote.
//      Just before the write the coordinator checks that it still holds
//      the root's lease (the fence, lease.h), and just after it checks
//      again: taken over in between, it withdraws a manifest that names an
//      object the new owner removed.
//      With the indexed layout (version 3) the coordinator builds the
//      directory from the plan and the ranks' index digests instead (no
//      chunk row crosses the communicator), writes it durably as
//      step-N/directory-<attempt>.ckptdir, and the manifest it publishes is
//      the small commit record naming it.
//   7. Remember the manifest (no need to decode what was just encoded),
//      record the checkpoint in the catalog, rewrite the LATEST hint, apply
//      retention and remove dead attempts (always after a replace: the
//      replaced attempt's objects). The commit stands whatever
//      happens here: failures are warnings, and what they leave is garbage
//      that a later collection removes.
#include "checkpoint/commit.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "checkpoint/gc.h"
#include "checkpoint/replace.h"
#include "checkpoint/retention.h"
#include "checkpoint/save.h"
#include "format/constants.h"
#include "util/log.h"

namespace ckpt {

using format::Manifest;

Manifest Committer::Header(int64_t step, const SaveOptions& save,
                           const SaveDecision& decision,
                           const SavePlan& plan) const {
  Manifest m;
  m.job_id = root_.options.job_id;
  m.step = step;
  m.epoch = save.epoch;
  m.created_unix_ms = root_.options.now_unix_ms();
  m.attempt = decision.attempt;
  m.world_size = static_cast<int32_t>(plan.hosts.size());
  m.chunk_size = root_.options.chunk_size;
  m.metadata = save.metadata;
  for (const auto& [name, value] : save.metrics) {
    if (std::isfinite(value)) m.metrics[name] = value;  // save.cc says why
  }
  return m;
}

format::SaveTimingRecord Committer::Timing(
    const std::vector<WriteResult>& results, int64_t commit_started_ms) const {
  format::SaveTimingRecord t;
  const int64_t now = RootContext::SteadyNowMs();
  t.save_ms = std::max<int64_t>(0, now - root_.save_started_ms);
  t.commit_ms = std::max<int64_t>(0, now - commit_started_ms);
  t.async = root_.in_background.load();
  t.stall_ms = t.async ? root_.background_stall_ms : t.save_ms;
  for (size_t r = 0; r < results.size(); ++r) {
    t.ranks.push_back({static_cast<int32_t>(r),
                       std::max<int64_t>(0, results[r].write_ms),
                       std::max<int64_t>(0, results[r].wait_ms)});
  }
  // A bounded record whatever the world size: the slowest writers are the
  // ones a reader looks for.
  if (t.ranks.size() > format::kMaxTimedRanks) {
    std::nth_element(t.ranks.begin(), t.ranks.begin() + format::kMaxTimedRanks,
                     t.ranks.end(), [](const auto& a, const auto& b) {
                       return a.write_ms > b.write_ms;
                     });
    t.ranks.resize(format::kMaxTimedRanks);
    std::sort(t.ranks.begin(), t.ranks.end(),
              [](const auto& a, const auto& b) { return a.rank < b.rank; });
  }
  return t;
}

Result<Manifest> Committer::BuildManifest(
    int64_t step, const SaveOptions& save, const SaveDecision& decision,
    const SavePlan& plan, const std::vector<WriteResult>& results) {
  Manifest m = Header(step, save, decision, plan);
  m.version = format::kManifestVersion;
  m.hosts = plan.hosts;
  // Chunks of each planned piece, gathered from the rank that wrote it.
  std::vector<std::vector<format::ChunkRecord>> chunks(plan.pieces.size());
  std::map<std::string, uint32_t> referenced;  // key -> index in m.objects
  for (size_t r = 0; r < results.size(); ++r) {
    const WriteResult& res = results[r];
    uint32_t own = 0;
    if (!res.key.empty()) {
      own = static_cast<uint32_t>(m.objects.size());
      m.objects.push_back(
          format::ObjectRecord{res.key, res.size, static_cast<int32_t>(r)});
    }
    for (const PieceChunks& p : res.pieces) {
      if (p.piece >= chunks.size()) {
        return AbortedError("rank " + std::to_string(r) +
                            " sent a bad piece index");
      }
      for (const ChunkRow& ch : p.chunks) {
        uint32_t in = own;
        if (ch.object != kOwnObject) {  // a chunk of the parent's
          const ObjectRef& o = res.refs[ch.object];
          auto [it, added] = referenced.try_emplace(
              o.key, static_cast<uint32_t>(m.objects.size()));
          if (added) {
            m.objects.push_back(format::ObjectRecord{o.key, o.size, o.rank});
            int64_t dep;
            std::string_view file;
            if (format::SplitStepKey(o.key, &dep, &file) &&
                std::find(m.depends_on.begin(), m.depends_on.end(), dep) ==
                    m.depends_on.end()) {
              m.depends_on.push_back(dep);
            }
          }
          in = it->second;
        }
        chunks[p.piece].emplace_back(ch).object = in;
      }
    }
  }
  for (const PlannedEntry& e : plan.entries) {
    format::EntryRecord rec;
    rec.name = e.name;
    rec.owner = e.owner;
    rec.kind = e.kind;
    rec.dtype = e.dtype;
    rec.shape = e.shape;
    rec.json = e.json;
    for (size_t pi : e.pieces) {
      const PlannedPiece& p = plan.pieces[pi];
      rec.pieces.push_back(format::PieceRecord{p.offsets, p.lengths, p.writer,
                                               std::move(chunks[pi])});
    }
    m.entries.push_back(std::move(rec));
  }
  if (!m.depends_on.empty()) {
    std::sort(m.depends_on.begin(), m.depends_on.end());
    m.version = format::kIncrementalManifestVersion;
    m.parent = decision.parent;
    m.chain = decision.parent_chain + 1;
  }
  CKPT_RETURN_IF_ERROR_CTX(format::ValidateManifest(m),
                           "the manifest would be inconsistent");
  return m;
}

Result<Manifest> Committer::BuildIndexed(
    int64_t step, const SaveOptions& save, const SaveDecision& decision,
    const SavePlan& plan, const std::vector<WriteResult>& results,
    PendingDirectoryEntries& entries, std::string& directory,
    std::shared_ptr<const format::Directory>& built) {
  Manifest h = Header(step, save, decision, plan);
  h.version = format::kScalableManifestVersion;
  format::Directory dir;
  dir.step = step;
  dir.world_size = h.world_size;
  format::ParseAttempt(decision.attempt, &dir.attempt);
  dir.hosts = plan.hosts;
  std::map<std::string, size_t> listed;  // object key -> index in dir
  const auto add = [&](const std::string& key, uint64_t size) -> Status {
    format::DataObjectId id;
    if (!format::ParseDataObjectId(key, &id)) {
      return AbortedError("object " + key + " is not named like a data object");
    }
    id.size = size;
    if (!listed.emplace(key, dir.objects.size()).second) return Status();
    dir.objects.push_back(id);
    h.data_bytes += size;
    if (id.step == step) {
      h.own_data_bytes += size;
    } else if (std::find(h.depends_on.begin(), h.depends_on.end(), id.step) ==
               h.depends_on.end()) {
      h.depends_on.push_back(id.step);
    }
    return Status();
  };
  for (size_t r = 0; r < results.size(); ++r) {
    const WriteResult& res = results[r];
    if (!res.indexed) {
      return AbortedError("rank " + std::to_string(r) +
                          " wrote no index (every rank must pass the same "
                          "Options::metadata_layout)");
    }
    dir.indexes.push_back({res.index_size, res.index_checksum});
    if (!res.key.empty()) CKPT_RETURN_IF_ERROR(add(res.key, res.size));
    for (const ObjectRef& o : res.refs) {
      CKPT_RETURN_IF_ERROR(add(o.key, o.size));
    }
  }
  dir.entries = entries.Take(plan);
  for (size_t r = 0; r < results.size(); ++r) {
    for (const WriteResult::EntrySum& e : results[r].entry_sums) {
      if (e.entry >= dir.entries.size()) {
        return AbortedError("rank " + std::to_string(r) +
                            " sent a bad entry index");
      }
      dir.entries[e.entry].pieces_sum =
          format::AddSums(dir.entries[e.entry].pieces_sum, e.sum);
    }
  }
  CKPT_RETURN_IF_ERROR(
      format::CheckDirectory(dir, "the directory would be inconsistent"));
  if (!h.depends_on.empty()) {
    std::sort(h.depends_on.begin(), h.depends_on.end());
    h.parent = decision.parent;
    h.chain = decision.parent_chain + 1;
  }
  directory = format::EncodeDirectory(dir);
  h.directory = {format::DirectoryKey(step, h.attempt), directory.size(),
                 Xxh3_128(directory)};
  CKPT_RETURN_IF_ERROR_CTX(format::ValidateManifest(h),
                           "the commit record would be inconsistent");
  Manifest out = format::WithDirectory(h, dir);
  built = std::make_shared<const format::Directory>(std::move(dir));
  return out;
}

Status Committer::CheckReferences(const Manifest& m) {
  for (const format::ObjectRecord& o : m.objects) {
    int64_t in;
    std::string_view file;
    if (!format::SplitStepKey(o.key, &in, &file) || in == m.step) continue;
    Result<ObjectInfo> info = root_.storage->Stat(o.key);
    if (info.ok() && info->size == o.size) continue;
    if (!info.ok() && info.status().code() != ErrorCode::kNotFound) {
      return info.status().WithContext("stat " + o.key);
    }
    return FailedPreconditionError(
        "the incremental save would reference data object " + o.key +
        " of step " + std::to_string(in) + ", which " +
        (info.ok() ? "has changed size" : "is missing") +
        " (deleted or damaged while the save ran); nothing was committed: "
        "save again, which compares with a complete checkpoint or saves in "
        "full");
  }
  return Status();
}

Status Committer::Publish(const Manifest& m, const std::string& bytes,
                          bool replace) {
  const std::string key = format::ManifestKey(m.step);
  // A step that does not load whole: Put replaces an object atomically, so
  // a reader finds the old manifest (and the old attempt's objects, still
  // there) or this one, never no step; only the lease holder gets here.
  if (replace) return root_.storage->PutString(key, bytes, PutMode::kOverwrite);
  if (!root_.storage->capabilities().atomic_create_if_absent) {
    // Best effort where the store cannot refuse an existing object: check
    // first. Only one job writes a root, so the race is between its own
    // retries, which use distinct steps.
    if (root_.storage->Stat(key).ok()) {
      return AlreadyExistsError("step is already committed");
    }
  }
  // THE COMMIT.
  Status s = root_.storage->PutString(key, bytes, PutMode::kCreateIfAbsent);
  if (s.code() == ErrorCode::kAlreadyExists) {
    return AlreadyExistsError("another save committed this step first");
  }
  return s;
}

Status Committer::RecheckAfterPublish(const Manifest& m) {
  Status lease = root_.lease->Check();
  if (lease.ok()) return lease;
  // Taken over between the fence and the write: the new owner may have
  // removed objects this manifest names before it existed. A manifest
  // whose objects are all there stands; one that lost any is withdrawn, as
  // if the commit had lost the race.
  std::vector<format::ObjectRecord> named = m.objects;
  named.insert(named.end(), m.metadata_objects.begin(),
               m.metadata_objects.end());
  for (const format::ObjectRecord& o : named) {
    Result<ObjectInfo> info = root_.storage->Stat(o.key);
    if (info.ok() && info->size == o.size) continue;
    Status removed = root_.storage->Delete(format::ManifestKey(m.step));
    if (!removed.ok() && removed.code() != ErrorCode::kNotFound) {
      LogWarning("withdrawing step " + std::to_string(m.step) + ": " +
                 removed.ToString());
    }
    root_.manifests.Forget(m.step);
    return FailedPreconditionError(
        lease.message() + "; while it committed, the new owner removed " +
        o.key + ", so the manifest was withdrawn: nothing was committed");
  }
  LogWarning(lease.message() + "; step " + std::to_string(m.step) +
             " was committed whole just before");
  return Status();
}

bool Committer::MayHaveCommitted(int64_t step, const Status& failure) {
  // Another commit won: ours did not happen. Any other failure may have
  // left the manifest written (a reply lost after the store wrote it), so
  // only a manifest that is certainly absent proves nothing was committed.
  if (failure.code() == ErrorCode::kAlreadyExists) return false;
  Result<ObjectInfo> manifest = root_.storage->Stat(format::ManifestKey(step));
  return manifest.ok() || manifest.status().code() != ErrorCode::kNotFound;
}

std::vector<int64_t> Committer::AfterCommit(
    Manifest m, const std::string& bytes, const CheckpointInfo& info,
    std::shared_ptr<const format::Directory> dir, bool replaced) {
  const int64_t step = m.step;
  const std::string op =
      "commit step " + std::to_string(step) + " in " + root_.Where();
  // The coordinator keeps what it just wrote instead of decoding it again
  // (a large manifest takes seconds to parse); the cache still checks the
  // object's size and mtime on every use.
  // The catalog, however it fails, holds this save up once at most.
  // An asynchronous save's calls are made on the recorder's thread, so that
  // the next call never waits for the catalog.
  CatalogRecorder::Batch catalog_batch(root_.catalog,
                                       !root_.in_background.load());
  root_.manifests.Forget(step);
  if (Result<ObjectInfo> written =
          root_.storage->Stat(format::ManifestKey(step));
      written.ok() && written->size == bytes.size()) {
    // A save of this step again is AlreadyExists without reading it.
    StepJudge(root_).Note(step, *written, "");
    // Version 3: the summary that listing, LATEST and retention read next
    // (decoding and checking the directory again was a fifth of a small
    // save's CPU with 10,000 entries).
    if (dir) {
      root_.manifests.RememberSummary(step, *written, std::move(m),
                                      std::move(dir));
    } else {
      root_.manifests.Remember(step, *written, std::move(m));
    }
  }
  root_.catalog.Committed(info, bytes);
  root_.manifests.UpdateLatestHint(
      root_.lease->enabled() ? std::optional<int64_t>(step) : std::nullopt);
  if (root_.known_steps) (*root_.known_steps)[step] = info;
  if (!root_.options.retention.enabled() && !root_.options.gc_after_save &&
      !replaced) {
    return {};
  }
  if (!replaced && root_.known_steps && !RetentionDeletes(step)) {
    // The root as this manager knows it (root_context.h): no dead attempt
    // to find and nothing retention would delete, so no listing.
    return {};
  }
  GcOptions gc;
  gc.retention = root_.options.retention;
  // A step saved below the newest (a rollback) is one no rule may keep;
  // it stays until a later collection, so the save that made it succeeds.
  Result<GcReport> report = Collector(root_).GarbageCollect(gc, step);
  if (!report.ok()) {
    // The checkpoint is committed; a failed clean-up only leaves garbage
    // that the next GarbageCollect removes.
    LogWarning("after " + op +
               ": garbage collection failed: " + report.status().ToString());
    return {};
  }
  return report->deleted_steps;
}

bool Committer::RetentionDeletes(int64_t step) {
  if (!root_.options.retention.enabled()) return false;
  std::vector<CheckpointInfo> infos;
  infos.reserve(root_.known_steps->size());
  for (const auto& [s, info] : *root_.known_steps) infos.push_back(info);
  std::set<int64_t> spared = {step};
  const CheckpointInfo& saved = root_.known_steps->at(step);
  spared.insert(saved.depends_on.begin(), saved.depends_on.end());
  root_.WarnUnranked(RetentionRanks(infos, root_.options.retention));
  for (int64_t doomed : StepsToDelete(infos, root_.options.retention)) {
    if (!spared.count(doomed)) return true;
  }
  return false;
}

SaveOutcome Committer::Commit(int64_t step, const SaveOptions& save,
                              const SaveDecision& decision,
                              const SavePlan& plan,
                              const std::vector<WriteResult>& results,
                              PendingDirectoryEntries& entries) {
  const std::string op =
      "commit step " + std::to_string(step) + " in " + root_.Where();
  const int64_t commit_started_ms = RootContext::SteadyNowMs();
  const bool indexed =
      root_.options.metadata_layout == Options::MetadataLayout::kIndexed;
  std::string directory;
  std::shared_ptr<const format::Directory> built;
  Result<Manifest> m = indexed
                           ? BuildIndexed(step, save, decision, plan, results,
                                          entries, directory, built)
                           : BuildManifest(step, save, decision, plan, results);
  if (!m.ok()) return SaveOutcome{m.status().WithContext(op), {}, true};
  // A commit that certainly did not happen: the ranks remove their objects
  // (`discard`), and the coordinator the directory it wrote.
  bool wrote_directory = false;
  const auto failed = [&](Status s, bool discard) {
    if (discard && wrote_directory)
      Saver(root_).DiscardAttempt(m->directory.key);
    return SaveOutcome{std::move(s), {}, discard};
  };
  if (Status s = CheckReferences(*m); !s.ok()) {
    return failed(s.WithContext(op), true);
  }
  // The fence: a coordinator whose lease was taken over (it stalled past
  // the lease period, or was broken) may no longer write the root; the new
  // owner may have collected what this save wrote.
  if (Status s = root_.lease->Check(); !s.ok()) {
    return failed(s.WithContext(op + ": nothing was committed"), true);
  }
  if (indexed) {
    // Durable before the commit record names it. The key carries the
    // attempt, so no other save writes it.
    if (Status s = root_.storage->PutString(m->directory.key, directory);
        !s.ok()) {
      return failed(s.WithContext(op + ": write " + m->directory.key), true);
    }
    wrote_directory = true;
  }
  m->timing = Timing(results, commit_started_ms);
  const std::string bytes = format::EncodeManifest(*m);
  if (Status s = Publish(*m, bytes, decision.replace); !s.ok()) {
    const bool discard = !MayHaveCommitted(step, s);
    return failed(s.WithContext(op), discard);
  }
  if (Status s = RecheckAfterPublish(*m); !s.ok()) {
    return failed(s.WithContext(op), true);
  }
  if (decision.replace) {
    LogWarning(op + ": step " + std::to_string(step) + " was damaged (" +
               decision.replace_because + "); this save replaced it");
  }
  SaveOutcome outcome;
  outcome.info = InfoFromManifest(*m);
  outcome.deleted_steps = AfterCommit(std::move(m).value(), bytes, outcome.info,
                                      std::move(built), decision.replace);
  return outcome;
}

}  // namespace ckpt
