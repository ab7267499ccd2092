// Save planning: which rank writes which piece.
//
// Every rank describes what it holds (an Offer); the offers are all-gathered
// and every rank runs the same deterministic MakePlan on them, so the plan is
// agreed without another round trip. A piece held by several ranks (a
// replicated tensor) is written by one of them only; pieces are handed out
// largest first to the least-loaded holder, which balances bytes across ranks.
#pragma once

#include <cstdint>
#include <future>
#include <string>
#include <vector>

#include "ckpt/state.h"
#include "ckpt/status.h"
#include "format/index.h"

namespace ckpt {

struct PieceOffer {
  std::string name;
  EntryKind kind = EntryKind::kTensor;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;  // global
  std::vector<int64_t> offsets;
  std::vector<int64_t> lengths;
  std::string json;         // metadata entries
  bool rank_local = false;  // belongs to the offering rank alone
};

struct Offer {
  std::string host;
  // A rank whose State is invalid says so here, so every rank fails together.
  ErrorCode error_code = ErrorCode::kOk;
  std::string error_message;
  std::vector<PieceOffer> pieces;
};

struct PlannedPiece {
  size_t entry = 0;  // index into SavePlan::entries
  std::vector<int64_t> offsets;
  std::vector<int64_t> lengths;
  uint64_t bytes = 0;
  int writer = 0;  // the rank that writes it
};

struct PlannedEntry {
  std::string name;
  int owner = -1;  // the rank of a rank-local entry; -1 for the whole job
  EntryKind kind = EntryKind::kTensor;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  std::string json;
  std::vector<size_t> pieces;  // indices into SavePlan::pieces
};

struct SavePlan {
  std::vector<PlannedEntry> entries;
  std::vector<PlannedPiece> pieces;
  std::vector<std::string> hosts;  // by rank
  std::vector<uint64_t> bytes_per_rank;
};

// What this rank holds. Invalid states become an Offer carrying the error.
Offer MakeOffer(const State& state, std::string host);

// The agreed plan. Fails (the same way on every rank) if any offer carries an
// error or the offers disagree about an entry.
Result<SavePlan> MakePlan(const std::vector<Offer>& offers);

// The tensor directory of a version 3 checkpoint saved by `plan`: every
// entry, its pieces summarized as runs (format/index.h). Needs no chunk row,
// so the coordinator builds it from the plan alone.
std::vector<format::DirectoryEntry> DirectoryEntries(const SavePlan& plan);

// DirectoryEntries of a plan, which the coordinator starts building beside
// its own writes when the plan is large: a pass over every piece of the
// job (docs/benchmarks.md, "The directory's summary beside the writes")
// then no longer lengthens the commit, which every rank waits for. The
// plan must outlive it; the destructor waits for the build.
class PendingDirectoryEntries {
 public:
  // Plans with fewer pieces are summarized at Take, on the caller's thread.
  static constexpr size_t kBesideWritesFrom = 16384;

  void Start(const SavePlan& plan);
  std::vector<format::DirectoryEntry> Take(const SavePlan& plan);

 private:
  std::future<std::vector<format::DirectoryEntry>> built_;
};

}  // namespace ckpt
