// The messages ranks exchange during the save and load protocols, as types.
//
// This file is the protocols' vocabulary and the only place that knows their
// wire form. Every message is encoded as
//
//   "ck" | version (1 byte) | type (1 byte) | body
//
// with integers little-endian and fixed-width, strings and lists prefixed by
// a 32-bit count. Decoding is bounds-checked and strict: a wrong magic,
// version or type, a count beyond the bytes left, an enum value out of range
// or trailing bytes is DataLoss naming the message, never a crash and never a
// silently defaulted field. Messages live only as long as one collective, so
// the version guards against mixing builds in one job, not against old data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/planner.h"
#include "ckpt/checkpoint_manager.h"
#include "ckpt/status.h"
#include "util/checksum.h"

namespace ckpt {

inline constexpr uint8_t kMessageVersion = 4;

// Save step 1: the coordinator's decision, broadcast to every rank.
struct SaveDecision {
  Status status;      // not ok: every rank returns it, nothing is written
  bool skip = false;  // min_seconds_between_saves: nothing to do
  std::string attempt;
  int64_t parent = -1;  // the incremental parent; -1: a full save
  int64_t parent_chain = 0;
};

// Incremental save: what one rank could reference in the parent and what it
// holds, all-gathered so every rank drops the references together.
struct ReferenceStats {
  uint64_t referenced = 0;
  uint64_t total = 0;
};

// Save step 4: one rank's written chunks (or its error). A chunk row is a
// format::ChunkRecord whose `object` is kOwnObject (in the object this rank
// wrote) or an index into WriteResult::refs (a chunk of the incremental
// parent's): the same type as an index's rows, so a rank's rows move into
// its index instead of being copied (half a million of them for 2 GiB of
// 4 KiB chunks).
using ChunkRow = format::ChunkRecord;
inline constexpr uint32_t kOwnObject = UINT32_MAX;

struct PieceChunks {
  uint64_t piece = 0;  // index into SavePlan::pieces
  std::vector<ChunkRow> chunks;
};

struct ObjectRef {
  std::string key;
  uint64_t size = 0;
  int32_t rank = 0;
};

struct WriteResult {
  Status status;
  std::string key;  // the object this rank wrote; empty: none
  uint64_t size = 0;
  std::vector<ObjectRef> refs;  // the parent's objects its rows point into
  // Manifest version 3: the rank wrote its index object (its chunk rows)
  // itself, and sends only its digest; `pieces` is then empty.
  bool indexed = false;
  uint64_t index_size = 0;
  Checksum128 index_checksum;
  // And, per entry it wrote pieces of, format::PiecesSum of those pieces,
  // which the directory adds up per entry.
  struct EntrySum {
    uint32_t entry = 0;  // index into SavePlan::entries
    Checksum128 sum;
  };
  std::vector<EntrySum> entry_sums;
  std::vector<PieceChunks> pieces;
  // How long this rank waited in the save before its write began (the
  // decision, the plan and the lease: the other ranks arriving) and how
  // long its write took (data object and index), for the commit record's
  // timing (docs/format.md).
  int64_t wait_ms = 0;
  int64_t write_ms = 0;
};

// Save step 7: the coordinator's outcome, broadcast to every rank.
struct SaveOutcome {
  Status status;
  std::vector<int64_t> deleted_steps;  // by retention, after the commit
  // With a failed status: the step is certainly not committed with this
  // attempt, so each rank removes the data object it wrote (no full-size
  // orphan waits for a collection). Never set when the commit's fate is
  // unknown.
  bool discard = false;
  // With an ok status: the committed checkpoint, as the coordinator wrote
  // it, so that no rank reads the manifest back (a read that fails after
  // the commit would make ranks disagree about a save that happened).
  CheckpointInfo info = {};
};

// Load: the steps rank 0 chose to try, newest first (one, for a step asked
// for by number), so ranks racing a commit try the same ones.
struct LoadSteps {
  Status status;
  std::vector<int64_t> steps;
};

// Load: one rank's outcome of reading and checking a step, all-gathered
// before any rank changes its state. `damaged`: the step itself is damaged
// (a resume tries an older one); otherwise the state does not fit it or
// the storage failed, and every rank fails.
struct LoadVote {
  Status status;
  bool damaged = false;
};

std::string EncodeSaveDecision(const SaveDecision& m);
Result<SaveDecision> DecodeSaveDecision(std::string_view bytes);

std::string EncodeReferenceStats(const ReferenceStats& m);
Result<ReferenceStats> DecodeReferenceStats(std::string_view bytes);

std::string EncodeWriteResult(const WriteResult& m);
Result<WriteResult> DecodeWriteResult(std::string_view bytes);

std::string EncodeSaveOutcome(const SaveOutcome& m);
Result<SaveOutcome> DecodeSaveOutcome(std::string_view bytes);

std::string EncodeLoadSteps(const LoadSteps& m);
Result<LoadSteps> DecodeLoadSteps(std::string_view bytes);

std::string EncodeLoadVote(const LoadVote& m);
Result<LoadVote> DecodeLoadVote(std::string_view bytes);

// Save step 2: what a rank holds (planner.h).
std::string EncodeOffer(const Offer& offer);
Result<Offer> DecodeOffer(std::string_view bytes);

}  // namespace ckpt
