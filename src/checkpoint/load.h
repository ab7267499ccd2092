// Load, LoadAll, LoadRankLocal (load.cc), and the two halves of a load the
// tiers drive (StageLoad, ApplyLoad).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/read_once.h"
#include "checkpoint/root_context.h"
#include "data/reader.h"
#include "data/viewed_reads.h"
#include "staging/device_copy.h"
#include "util/parallel_copy.h"

namespace ckpt {

// The box this rank holds of tensor `e` (`rec`): a piece, or all of it;
// read into `dest`.
BoxRead BoxOf(const format::EntryRecord* rec, const Entry& e,
              std::span<std::byte> dest = {});

// A load read and checked, before it changes the caller's state.
struct StagedLoad {
  std::shared_ptr<const format::Manifest> manifest;
  std::vector<CopyJob> to_host;  // staging memory -> host tensors
  const CudaDriver* cuda = nullptr;
  std::vector<DeviceCopy> to_devices;  // staging memory -> device tensors
  std::vector<std::pair<std::string, std::string>> blobs;     // name, bytes
  std::vector<std::pair<std::string, std::string>> metadata;  // name, JSON
  // Streaming: the host tensors read straight into place (name, bytes),
  // changed once the reads began.
  std::vector<std::pair<std::string, uint64_t>> written;
  // Transactional from a storage with object views: the host tensors'
  // boxes, already checked in place, to copy into their buffers.
  std::shared_ptr<ViewedReads> viewed;
  std::vector<BoxRead> copies;
  // The chunks a read-once load holds (read_once.h), which `viewed` may
  // view.
  std::shared_ptr<Storage> held;
  // Read nothing: another rank failed before the reads were shared
  // (read_once.h), and its vote fails the step.
  bool incomplete = false;
};

class Loader {
 public:
  explicit Loader(RootContext& root) : root_(root) {}

  // `damaged`, when given, is set on failure to whether the step that
  // failed is damaged (StageLoad; agreed across ranks).
  Result<CheckpointInfo> Load(std::optional<int64_t> step, State& state,
                              const LoadOptions& load, bool* damaged = nullptr);
  // The two halves of Load at one step, on this rank alone (no collective):
  // StageLoad reads every byte `state` needs from `step` and checks it,
  // changing nothing of `state` under LoadOptions::transactional (without,
  // host tensors are written at once); ApplyLoad then writes the rest into
  // `state`. A failed StageLoad sets `damaged` when the step itself is
  // damaged (DataLoss: a checksum, a missing or truncated object, a damaged
  // manifest or index; or a manifest gone since it was listed), not when
  // the state does not fit it or the storage failed.
  Status StageLoad(int64_t step, State& state, const LoadOptions& load,
                   StagedLoad& out, bool& damaged);
  Status ApplyLoad(StagedLoad& staged, State& state);
  Result<LoadedCheckpoint> LoadAll(std::optional<int64_t> step,
                                   const std::vector<std::string>& names);
  Result<LoadedCheckpoint> LoadRankLocal(std::optional<int64_t> step,
                                         std::string_view name);
  // The asked-for step, or the newest complete one by a listing (as
  // Latest); agreed across ranks.
  Result<int64_t> ResolveStep(std::optional<int64_t> step);

 private:
  // The steps to try: the asked-for one, or every committed one newest
  // first; agreed across ranks.
  Result<std::vector<int64_t>> StepsToTry(std::optional<int64_t> step);
  // Tries `attempt` (this rank's part of loading one step, which sets
  // `damaged` as StageLoad does) at each step of StepsToTry until every
  // rank succeeds at the same one, which it returns: every rank agrees
  // after each attempt, a damaged step is skipped (with a warning) only on
  // a resume, and any other failure fails every rank at once. Without
  // `agree_explicit`, an explicit step is this rank's alone (no
  // collective: LoadAll fills a State of its own, which needs no
  // agreement, and may be called by one rank).
  Result<int64_t> FirstStepThatLoads(
      std::optional<int64_t> step,
      const std::function<Status(int64_t, bool& damaged)>& attempt,
      bool* damaged = nullptr, bool agree_explicit = true);
  // Step `step`'s manifest with at least the pieces that meet `state`'s
  // boxes.
  Result<std::shared_ptr<const format::Manifest>> ReadFor(int64_t step,
                                                          const State& state);
  // The records of `state`'s entries, once every check that needs no data
  // has passed.
  Result<std::vector<const format::EntryRecord*>> MatchEntries(
      const format::Manifest& m, const State& state, const LoadOptions& load,
      const std::string& op);
  // Checks that the objects `m` names for `entries` exist with the recorded
  // sizes, before a single byte is read into the caller's buffers.
  Status CheckObjects(const format::Manifest& m,
                      const std::vector<const format::EntryRecord*>& entries);
  // StageLoad's halves: the manifest, the entries matched and the objects
  // checked (setting `damaged` as StageLoad does); then the reads from
  // `from` (the root's storage, or the shared reads over it).
  Status PlanStage(int64_t step, State& state, const LoadOptions& load,
                   StagedLoad& out,
                   std::vector<const format::EntryRecord*>& records,
                   bool& damaged);
  Status ReadStage(State& state, const LoadOptions& load,
                   const std::vector<const format::EntryRecord*>& records,
                   Storage& from, StagedLoad& out, bool& damaged);
  // Whether an all-or-nothing load from `from` checks the host tensors of
  // `state` (`records`) where they lie in its object views, rather than in
  // staging memory (load_path.cc).
  bool ChecksInViews(const State& state,
                     const std::vector<const format::EntryRecord*>& records,
                     Storage& from, const format::Manifest& m) const;
  // The chunks that `state`'s boxes of `records` meet.
  Status NeededChunks(const State& state,
                      const std::vector<const format::EntryRecord*>& records,
                      std::vector<NeededChunk>& out);
  // Reads `records` into `out.state` under the names `names`.
  Status ReadInto(const format::Manifest& m,
                  const std::vector<const format::EntryRecord*>& records,
                  const std::vector<std::string>& names, LoadedCheckpoint& out);
  // Appends `read`, cut into slabs for the pool, to `reads`.
  void AddSlabs(BoxRead read, std::vector<BoxRead>& reads) const;

  RootContext& root_;
};

}  // namespace ckpt
