// The save protocol on every rank (save.cc): decide, plan, write, gather,
// full and incremental; the coordinator's commit is commit.h's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/root_context.h"
#include "data/planner.h"
#include "data/writer.h"
#include "messages/messages.h"
#include "staging/device_pipeline.h"

namespace ckpt {

// InvalidArgument when `c`'s level is outside zstd's (`what` says whose).
Status CheckCompression(const Compression& c, const std::string& what);

class Saver {
 public:
  explicit Saver(RootContext& root) : root_(root) {}

  // `state_error`, when set, stands for the state (a rank whose state could
  // not be staged still takes part in the collectives, and fails them).
  Result<SaveResult> Save(int64_t step, const State& state,
                          const SaveOptions& save,
                          const Status& state_error = Status());
  // Removes this rank's object `key` (if any) of an attempt that can no
  // longer commit.
  void DiscardAttempt(const std::string& key);

 private:
  // This rank's compression for the save of `state` (null: none), from
  // SaveOptions::compression or Options::compression; kAuto decides from
  // RootContext::compression_figures, sampling the state's chunks once.
  std::optional<ChunkCompression> ChooseCompression(const State& state,
                                                    const SaveOptions& save);
  // Whether the save may compress (before the state is staged): kZstd
  // always; kAuto unless this rank's figures already say it does not pay.
  bool MayCompress(const SaveOptions& save) const;
  // Keeps what writing `w` measured for the next kAuto decision.
  void NoteWrite(const WrittenObject& w);
  // Step 1 on the coordinator.
  SaveDecision DecideSave(int64_t step, const SaveOptions& save);
  // Step 2b on the coordinator: the lease, and the decision under it.
  SaveDecision ConfirmSave(int64_t step, const SaveOptions& save,
                           const SaveDecision& decided);
  // The parent an incremental save of `step` compares with (parent -1 for a
  // full save): IncrementalPolicy applied to the newest committed checkpoint
  // below `step`.
  SaveDecision DecideParent(int64_t step);
  // Whether every object `m` names is there with its recorded size, from a
  // listing of each step directory they lie in (warns naming the first
  // missing one).
  bool ObjectsThere(const format::Manifest& m);
  // Step 3 of a full save on this rank: its pieces in one data object.
  WriteResult WriteFull(int64_t step, const std::string& attempt,
                        const State& state, const SavePlan& plan,
                        const std::vector<size_t>& mine);
  // The reads of this rank's device pieces of a full save, through bounce.
  Result<std::unique_ptr<DeviceReadPipeline>> StartDeviceReads(
      const State& state, std::vector<DeviceReadPipeline::Segment> pieces);
  // Step 3 of an incremental save on this rank (collective: every rank
  // calls it): rows that reference the parent's objects name them in refs.
  WriteResult WriteIncremental(int64_t step, const std::string& attempt,
                               const State& state, const SaveOptions& save,
                               const SavePlan& plan,
                               const std::vector<size_t>& mine, int64_t parent);
  // Step 3b (indexed layout): writes this rank's index object from
  // `result`'s chunk rows, durably, and replaces the rows with its digest; a
  // failure becomes `result`'s status.
  void WriteIndex(int64_t step, const std::string& attempt,
                  const SavePlan& plan, WriteResult& result);
  // Step 4: every rank's result (a single rank keeps its own).
  Result<std::vector<WriteResult>> GatherResults(WriteResult mine);
  // Whether `state` is the asynchronous save's staged copy, whose memory
  // (huge pages, large entries page-aligned) is written in place.
  bool IsStaged(const State& state) const { return &state == &root_.staged; }

  RootContext& root_;
  // The save in progress's compression on this rank (ChooseCompression).
  std::optional<ChunkCompression> compress_;
};

}  // namespace ckpt
