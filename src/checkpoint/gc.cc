// Garbage collection (GarbageCollect, `ckpt gc`, and after a save when
// retention or gc_after_save is on):
//
//   1. Retention: the committed steps no rule keeps (retention.h) are
//      deleted newest first (after a save, never the step it just committed,
//      which may lie below the newest: a rollback), so a dependant always goes
//      before what it depends on and a crash part-way never leaves a checkpoint
//      without its dependency (delete.cc).
//   2. Read the manifests that remain: the objects they name are live;
//      damaged steps are left untouched for someone to look at.
//   Steps 1 to 3 work from one listing of the root, taken first: each
//   delete reads none of its own, so a collection is linear in the number
//   of checkpoints.
//   3. Dead attempts: ckpt's own objects (data objects, a backend's
//      temporaries) that no manifest names. Holding the root's lease
//      (lease.h), every such object is dead, whatever its step or age: every
//      writer holds the lease, so none is writing now. Without a lease
//      (Options::lease_seconds 0) only those in a step at or below the
//      newest committed one, or older than gc_grace_seconds. Root-level
//      temporaries (of the LATEST hint, of a lease) once old. Nothing else
//      is ever deleted. Before deleting any, the lease is checked again
//      after the listing: taken over (or never truly won, on a store without
//      an atomic create-if-absent), the collection deletes nothing more.
//   4. Writes that died unfinished show in no listing but a store may keep
//      them (s3://: incomplete multipart uploads): the same rule picks the
//      dead ones to abort; a store that cannot tell does not fail the run.
#include "checkpoint/gc.h"

#include <algorithm>
#include <map>
#include <set>

#include "checkpoint/delete.h"
#include "checkpoint/inspect.h"
#include "checkpoint/retention.h"
#include "format/constants.h"
#include "format/layout.h"
#include "util/log.h"

namespace ckpt {

using format::Manifest;

namespace {

// What step 2 found.
struct LiveSet {
  std::set<std::string> referenced;  // object keys a manifest names
  std::set<int64_t> damaged;         // steps whose manifest does not validate
  int64_t newest = -1;               // the newest committed step
};

}  // namespace

void RootContext::WarnUnranked(const Status& ranks) {
  if (!ranks.ok() && !warned_unranked.exchange(true)) {
    LogWarning(ranks.message() + " (" + Where() + ")");
  }
}

Result<GcReport> Collector::GarbageCollect(const GcOptions& gc,
                                           std::optional<int64_t> keep) {
  GcReport report;
  // Filled again at the end if this collection sees the whole root.
  root_.known_steps.reset();
  // One listing of the root serves every step below: a listing per deleted
  // step made a collection quadratic in the number of checkpoints. Objects
  // written after it are not seen, so they are left alone.
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> all, root_.storage->List(""));
  std::vector<std::pair<int64_t, ObjectInfo>> listed;
  DeleteRun run;
  for (const ObjectInfo& o : all) {
    int64_t step;
    std::string_view file;
    if (!format::SplitStepKey(o.key, &step, &file)) continue;
    if (file == format::kManifestName) listed.emplace_back(step, o);
    run.objects[step].push_back(o);
  }
  std::sort(listed.begin(), listed.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });

  // 1. Retention.
  const RetentionPolicy policy =
      gc.retention ? *gc.retention : root_.options.retention;
  // The listing's sizes mark the steps that would not load (an object
  // missing or of another size): retention neither counts nor deletes them.
  std::map<std::string, uint64_t> listed_sizes;
  for (const ObjectInfo& o : all) listed_sizes.emplace(o.key, o.size);
  const std::vector<CheckpointInfo> infos =
      Inspector(root_).Infos(listed, &listed_sizes);
  if (Status ranks = RetentionRanks(infos, policy); !ranks.ok()) {
    // Asked for (ckpt gc, GarbageCollect): refused whole, nothing deleted.
    // After a save, which has committed: said once, and the collection of
    // dead attempts goes on.
    if (!keep)
      return ranks.WithContext("garbage collection of " + root_.Where());
    root_.WarnUnranked(ranks);
  }
  // In a dry run a step that only doomed steps depend on may go: those
  // dependants are still there.
  std::vector<int64_t> doomed = StepsToDelete(infos, policy);
  if (keep) {
    std::set<int64_t> spared = {*keep};
    for (const CheckpointInfo& info : infos) {
      if (info.step == *keep) {
        spared.insert(info.depends_on.begin(), info.depends_on.end());
      }
    }
    std::erase_if(doomed, [&](int64_t s) { return spared.count(s) > 0; });
  }
  run.going.insert(doomed.begin(), doomed.end());

  // 2. What stays: the objects its manifests name are live (and held back
  // from the deletes of step 1); damaged steps are left untouched.
  LiveSet live;
  for (const auto& [step, info] : listed) {
    if (run.going.count(step)) continue;
    Result<std::shared_ptr<const Manifest>> m =
        root_.manifests.Summary(step, info);
    if (!m.ok()) {
      live.damaged.insert(step);
      continue;
    }
    live.newest = std::max(live.newest, step);
    for (int64_t d : (*m)->depends_on) run.dependants[d].push_back(step);
    for (const auto& o : (*m)->objects) live.referenced.insert(o.key);
    for (const auto& o : (*m)->metadata_objects) {
      live.referenced.insert(o.key);
    }
  }
  run.named_by_staying = live.referenced;

  std::set<int64_t> gone_already;
  // The keys the deletes removed or found gone: not dead attempts below.
  std::set<std::string> already;
  for (auto it = doomed.rbegin(); it != doomed.rend(); ++it) {
    DeleteReport deleted;
    Status s = Deleter(root_).Delete(*it, &run, &deleted, gc.dry_run);
    // Gone already: another collection (or delete) got there first, which
    // ends in the same state.
    if (s.code() == ErrorCode::kNotFound) {
      gone_already.insert(*it);
      continue;
    }
    CKPT_RETURN_IF_ERROR(s);
    for (const DeleteReport::Object& o : deleted.removed) {
      report.deleted_objects.push_back(o.key);
      already.insert(o.key);
    }
    for (const DeleteReport::Object& o : deleted.skipped) {
      already.insert(o.key);
    }
    report.bytes_freed += deleted.bytes_freed;
    report.step_reports.push_back(std::move(deleted));
  }
  for (int64_t step : doomed) {
    if (!gone_already.count(step)) report.deleted_steps.push_back(step);
  }
  if (!gc.dry_run && !report.deleted_steps.empty()) {
    root_.manifests.UpdateLatestHint();
  }

  // 3. Dead attempts, from the same listing.
  // Still the owner after that listing: then nothing in it was written by
  // a party that took the root over (or that raced us for it on a store
  // without an atomic create and also believes it won), so what no
  // manifest names is dead. Lost, delete nothing.
  if (!gc.dry_run) {
    CKPT_RETURN_IF_ERROR(root_.CheckLeaseBeforeDeleting(
        "garbage collection in " + root_.Where()));
  }
  const int64_t now = root_.options.now_unix_ms();
  const int64_t grace_ms = root_.options.gc_grace_seconds * 1000;
  // Holding the lease (a dry run: as if holding it), no other party can be
  // writing, so an attempt no manifest names can never commit.
  const bool owned = root_.lease->enabled();
  // A step whose manifest the listing left out but something holds (a
  // symbolic link, a directory, a FIFO: never read) is kept whole, not
  // taken for a dead attempt: it may be a checkpoint someone restored.
  std::set<int64_t> listed_steps;
  for (const auto& [step, info] : listed) listed_steps.insert(step);
  std::map<int64_t, bool> unreadable_manifest;
  const auto manifest_unreadable = [&](int64_t step) {
    auto [it, fresh] = unreadable_manifest.try_emplace(step, false);
    if (fresh && !listed_steps.count(step)) {
      Result<ObjectInfo> m = root_.storage->Stat(format::ManifestKey(step));
      it->second = m.ok() || m.status().code() != ErrorCode::kNotFound;
      if (it->second) {
        LogWarning("garbage collection in " + root_.Where() + ": step " +
                   std::to_string(step) + " is kept: its manifest " +
                   (m.ok() ? std::string("appeared since the listing")
                           : "cannot be read (" + m.status().message() + ")"));
      }
    }
    return it->second;
  };
  for (const ObjectInfo& o : all) {
    if (live.referenced.count(o.key) || already.count(o.key)) continue;
    const bool old = now - o.mtime_unix_ms > grace_ms;
    int64_t step;
    std::string_view file;
    bool dead = false;
    if (format::SplitStepKey(o.key, &step, &file)) {
      if (live.damaged.count(step) || file == format::kManifestName ||
          gone_already.count(step)) {
        continue;
      }
      const bool ours = format::IsCkptObjectKey(o.key) ||
                        IsTemporaryOf(*root_.storage, o.key);
      if (ours && manifest_unreadable(step)) continue;
      // Without the lease: an attempt at a step at or below the newest
      // committed one can no longer commit; a newer one may still be
      // running elsewhere.
      dead = ours && (owned || step <= live.newest || old);
    } else {
      // A root-level object's dead write: of the LATEST hint or a lease.
      const std::optional<std::string> of = root_.storage->TemporaryOf(o.key);
      dead = of &&
             (*of == format::kLatestName || format::ParseLeaseKey(*of) >= 0) &&
             old;
    }
    if (!dead) continue;
    if (!gc.dry_run) {
      Status s = root_.storage->Delete(o.key);
      if (!s.ok() && s.code() != ErrorCode::kNotFound) {
        return s.WithContext("garbage collection in " + root_.Where());
      }
    }
    report.deleted_objects.push_back(o.key);
    report.bytes_freed += o.size;
  }

  // 4. Unfinished writes.
  Result<std::vector<std::string>> aborted =
      root_.storage->AbortIncompleteWrites(
          format::kStepPrefix, [&](const ObjectInfo& o) {
            int64_t step;
            std::string_view file;
            if (o.key.ends_with('/')) {
              // An empty step folder (file://, a save killed before its
              // first file): nobody's data, gone once no writer can be
              // filling it.
              step = format::ParseStepDirName(
                  std::string_view(o.key).substr(0, o.key.size() - 1));
              const bool dead = step >= 0 && !live.damaged.count(step) &&
                                (owned || now - o.mtime_unix_ms > grace_ms);
              if (dead && gc.dry_run) report.deleted_objects.push_back(o.key);
              return dead && !gc.dry_run;
            }
            if (!format::SplitStepKey(o.key, &step, &file) ||
                live.damaged.count(step)) {
              return false;
            }
            const bool manifest = file == format::kManifestName;
            const bool ours = manifest || format::IsCkptObjectKey(o.key);
            const bool old = now - o.mtime_unix_ms > grace_ms;
            const bool dead =
                ours && (owned || old || (step <= live.newest && !manifest));
            if (dead && gc.dry_run) report.deleted_objects.push_back(o.key);
            return dead && !gc.dry_run;
          });
  if (aborted.ok()) {
    for (std::string& key : *aborted) {
      report.deleted_objects.push_back(std::move(key));
    }
  } else {
    LogWarning(
        "garbage collection in " + root_.Where() +
        ": incomplete uploads were left: " + aborted.status().ToString());
  }
  // A root with a damaged or incomplete step is left to the whole-root
  // path: retention must see which steps are whole, and such steps are for
  // someone to look at.
  if (!gc.dry_run && owned && live.damaged.empty()) KnowSteps(infos, report);
  return report;
}

void Collector::KnowSteps(const std::vector<CheckpointInfo>& infos,
                          const GcReport& report) {
  // Holding the lease, having listed the whole root: from here on this
  // manager's own commits are the root's only changes (root_context.h).
  // What this collection deleted was a deleted step's or named by no
  // manifest, so the listing (`incomplete`) still judges the steps that
  // stay.
  const std::set<int64_t> deleted(report.deleted_steps.begin(),
                                  report.deleted_steps.end());
  std::map<int64_t, CheckpointInfo> known;
  for (const CheckpointInfo& info : infos) {
    if (deleted.count(info.step)) continue;
    if (!info.incomplete.empty()) return;
    known.emplace(info.step, info);
  }
  root_.known_steps = std::move(known);
}

}  // namespace ckpt
