// Replacing a committed step that does not load whole, which a resume
// skips for an older one: the job trains its number again, and a save of
// it that failed with AlreadyExists would stop the job at every restart.
//
//   1. The coordinator's save step 1 finds the step committed. Without the
//      root's lease on (Options::lease_seconds 0) nobody owns the root, so
//      nobody replaces: AlreadyExists, as for a whole step.
//   2. Whether it loads whole: what this manager found before for the same
//      manifest object (same size and mtime) — a load of it that met
//      damage, an earlier check, or its own commit — else a verify now,
//      every chunk of the step read on the coordinator and checked against
//      its checksum (verify.cc). Damage is DataLoss or a missing manifest;
//      a storage error fails the save, and a whole step is AlreadyExists.
//      A manifest of a version this build does not read fails the save
//      too: a newer ckpt's step is not this build's to replace.
//   3. The decision (replace, and why) is broadcast, so every rank of a
//      many-rank save acts on the coordinator's. The save is decided again
//      once the coordinator holds the lease (save.cc, step 2b): only the
//      lease holder replaces, and the root may have changed meanwhile.
//   4. The ranks write the new attempt's objects, whose names carry its
//      attempt id, beside the old ones; the commit overwrites the manifest
//      in one atomic Put (commit.cc). A reader finds the old checkpoint or
//      the new whole one, never neither and never a mix (each names only
//      its own attempt's objects); a crash before the Put leaves the old
//      one and garbage, after it the new one and the old attempt's objects,
//      which the collection after the commit removes unless a dependant
//      names them.
#include "checkpoint/replace.h"

#include "checkpoint/verify.h"

namespace ckpt {

namespace {

// The verdicts kept: a resume meets a few damaged steps, not hundreds.
constexpr size_t kMaxVerdicts = 16;

bool SameObject(const ObjectInfo& a, const ObjectInfo& b) {
  return a.size == b.size && a.mtime_unix_ms == b.mtime_unix_ms;
}

// A manifest whose checksum holds but whose version this build does not
// read (the decoder's and the header check's words for it).
bool NewerVersion(const Status& s) {
  const std::string& m = s.message();
  return m.find("is not supported (this build reads versions") !=
             std::string::npos ||
         m.find("unsupported manifest version") != std::string::npos;
}

}  // namespace

void StepJudge::Note(int64_t step, const ObjectInfo& manifest,
                     std::string damage) {
  root_.verdicts[step] = {manifest, std::move(damage)};
  // The lowest steps go first: a save replaces the steps a resume skipped,
  // which are the newest.
  while (root_.verdicts.size() > kMaxVerdicts) {
    root_.verdicts.erase(root_.verdicts.begin());
  }
}

const RootContext::StepVerdict* StepJudge::Known(
    int64_t step, const ObjectInfo& manifest) const {
  auto it = root_.verdicts.find(step);
  if (it == root_.verdicts.end() || !SameObject(it->second.manifest, manifest))
    return nullptr;
  return &it->second;
}

Result<std::string> StepJudge::Damage(int64_t step,
                                      const ObjectInfo& manifest) {
  if (const RootContext::StepVerdict* known = Known(step, manifest)) {
    return known->damage;
  }
  std::string damage;
  Result<VerifyReport> report = Verifier(root_).Verify(step, nullptr);
  if (report.ok()) {
    if (!report->ok()) {
      damage = report->problems.front();
      if (report->problems.size() > 1) {
        damage += " (and " + std::to_string(report->problems.size() - 1) +
                  " more problems)";
      }
      // It loads whole (a load reads no header), but other safetensors
      // readers of its files would fail: replaced all the same, and said
      // so, so that nobody reads "did not load" of a step that loads.
      if (report->header_only) {
        damage =
            "its data files' safetensors headers alone are damaged, "
            "which a load does not read but other safetensors readers "
            "do: " +
            damage;
      }
    }
  } else if (NewerVersion(report.status())) {
    // Most likely a newer ckpt's step, not a damaged one: never replaced by
    // a build that cannot read it.
    return FailedPreconditionError(
        "step " + std::to_string(step) + " in " + root_.Where() +
        " has a manifest version this build does not read (written by a "
        "newer ckpt?); it is not replaced: " +
        report.status().ToString());
  } else if (report.status().code() == ErrorCode::kDataLoss ||
             report.status().code() == ErrorCode::kNotFound) {
    damage = report.status().ToString();  // a damaged or vanished manifest
  } else {
    return report.status();
  }
  Note(step, manifest, damage);
  return damage;
}

SaveDecision StepJudge::Decide(int64_t step, const ObjectInfo& manifest) {
  SaveDecision d;
  const std::string committed = "step " + std::to_string(step) +
                                " is already committed in " + root_.Where();
  if (!root_.lease->enabled()) {
    const RootContext::StepVerdict* known = Known(step, manifest);
    d.status = AlreadyExistsError(
        committed +
        (known && !known->damage.empty()
             ? "; it does not load whole (" + known->damage +
                   "), but only a manager that holds the root's lease "
                   "replaces such a step, and this one has ownership off "
                   "(lease_seconds 0): delete it first"
             : ""));
    return d;
  }
  Result<std::string> damage = Damage(step, manifest);
  if (!damage.ok()) {
    d.status = damage.status().WithContext(
        "save step " + std::to_string(step) + " in " + root_.Where() +
        ": checking whether the committed step loads whole");
  } else if (damage->empty()) {
    d.status = AlreadyExistsError(committed);
  } else {
    d.replace = true;
    d.replace_because = *std::move(damage);
  }
  return d;
}

}  // namespace ckpt
