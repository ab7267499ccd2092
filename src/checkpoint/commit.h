// The coordinator's commit and what follows it (commit.cc): steps 6-7 of
// the save protocol (save.h), then the catalog, LATEST and retention (gc.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/root_context.h"
#include "data/planner.h"
#include "messages/messages.h"

namespace ckpt {

class Committer {
 public:
  explicit Committer(RootContext& root) : root_(root) {}

  // Steps 6-7 on the coordinator; the outcome to broadcast.
  // `entries` is the plan's directory, started beside the writes.
  SaveOutcome Commit(int64_t step, const SaveOptions& save,
                     const SaveDecision& decision, const SavePlan& plan,
                     const std::vector<WriteResult>& results,
                     PendingDirectoryEntries& entries);

 private:
  // The fields every manifest version shares: job, step, epoch, time,
  // attempt, world size, chunk size, the user's metadata and metrics.
  format::Manifest Header(int64_t step, const SaveOptions& save,
                          const SaveDecision& decision,
                          const SavePlan& plan) const;
  Result<format::Manifest> BuildManifest(
      int64_t step, const SaveOptions& save, const SaveDecision& decision,
      const SavePlan& plan, const std::vector<WriteResult>& results);
  // Version 3: the directory from the plan and the ranks' index digests,
  // encoded into `directory` (and kept as `built`), and the commit record
  // with it (as format::WithDirectory gives it: objects and metadata
  // objects listed).
  Result<format::Manifest> BuildIndexed(
      int64_t step, const SaveOptions& save, const SaveDecision& decision,
      const SavePlan& plan, const std::vector<WriteResult>& results,
      PendingDirectoryEntries& entries, std::string& directory,
      std::shared_ptr<const format::Directory>& built);
  // Every object of an earlier step that `m` references is still there.
  Status CheckReferences(const format::Manifest& m);
  // Writes the manifest with create-if-absent (`replace`: over the
  // manifest of a step that does not load whole): THE COMMIT.
  Status Publish(const format::Manifest& m, const std::string& bytes,
                 bool replace);
  // The fence again after Publish: withdraws the manifest if the lease was
  // lost meanwhile and an object it names is gone.
  Status RecheckAfterPublish(const format::Manifest& m);
  // Whether a failed Publish of `step` may still have left its manifest.
  bool MayHaveCommitted(int64_t step, const Status& failure);
  // After the commit: catalog, LATEST, retention. Failures only warn.
  // `info` is InfoFromManifest(m), which the outcome carries too; `dir` is
  // a version 3 commit's directory (null for versions 1 and 2). `replaced`:
  // the commit replaced a step's manifest, whose objects are collected.
  std::vector<int64_t> AfterCommit(format::Manifest m, const std::string& bytes,
                                   const CheckpointInfo& info,
                                   std::shared_ptr<const format::Directory> dir,
                                   bool replaced);
  // Whether retention, deciding from root_.known_steps (known, holding
  // `step` just committed), deletes a step other than `step` and what it
  // depends on.
  bool RetentionDeletes(int64_t step);
  format::SaveTimingRecord Timing(const std::vector<WriteResult>& results,
                                  int64_t commit_started_ms) const;

  RootContext& root_;
};

}  // namespace ckpt
