// The messages ranks exchange, as types: every payload of a collective
// (AllGather, Broadcast, SendRecv) the library makes, in the save and load
// protocols, the tiers and the job runner.
//
// This file is the protocols' vocabulary; messages.cc (save, load) and
// tier_messages.cc (tiers, runner) are the only places that know their wire
// form, through one Writer and Reader (message_codec.h). Two kinds of
// collective are not messages, on purpose: the communicator implementations
// (src/dist, and the C API's adapter of a caller's callbacks in
// src/capi/c_catalog_comm.cc) move bytes they are given, and the C API's
// wrapper of a ckpt communicator for the caller (src/capi/c_mpi.cc) passes
// the caller's own payload through as opaque bytes. Barrier carries no
// payload. scripts/check-layering.sh holds every other collective call to
// an Encode*() result. Every message is encoded as
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
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "ckpt/communicator.h"
#include "ckpt/status.h"
#include "data/planner.h"
#include "util/checksum.h"

namespace ckpt {

// 5: SaveDecision carries the coordinator's step.
inline constexpr uint8_t kMessageVersion = 5;

// Save step 1: the coordinator's decision, broadcast to every rank.
struct SaveDecision {
  Status status;      // not ok: every rank returns it, nothing is written
  bool skip = false;  // min_seconds_between_saves: nothing to do
  // The step the coordinator saves: a rank asked to save another one (a
  // step counter that drifted) fails the save on every rank.
  int64_t step = -1;
  std::string attempt;
  int64_t parent = -1;  // the incremental parent; -1: a full save
  int64_t parent_chain = 0;
  // The step is committed but does not load whole: the commit overwrites
  // its manifest (commit.cc), and why it does not load whole.
  bool replace = false;
  std::string replace_because;
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

// Load, every byte read once (read_once.h): a chunk by its content, so
// that equal chunks anywhere in the checkpoint are one.
struct ChunkId {
  Checksum128 sum;
  uint64_t length = 0;
  friend bool operator==(const ChunkId&, const ChunkId&) = default;
  friend bool operator<(const ChunkId& a, const ChunkId& b) {
    return std::tie(a.sum.high, a.sum.low, a.length) <
           std::tie(b.sum.high, b.sum.low, b.length);
  }
};

// Load, every byte read once: what one rank needs of a step, all-gathered
// before any rank reads. `planned` false: the rank failed before it knew
// (its own vote says why), and no rank reads for another.
struct ReadOncePlan {
  // Where the rank reads a chunk from: a hash of the object's key and the
  // offset in it, so that chunks that lie side by side are read together.
  struct Place {
    uint64_t object = 0;
    uint64_t offset = 0;
  };
  bool planned = false;
  bool can_send = false;  // its communicator passes messages (SendRecv)
  // kAuto over a storage that hands objects over in place: with every rank
  // on one host, that host's memory already shares them.
  bool in_place = false;
  // kAuto: whether the rest of the shared chunks go rank to rank is
  // decided on what the ranks measure (ReadOnceRates).
  bool measure = false;
  std::string host;             // its host name: ranks of one host are a node
  std::vector<ChunkId> chunks;  // sorted, each once
  std::vector<Place> places;    // one a chunk
};

// Load, every byte read once: the header of a batch of chunks one rank read
// for another, in the order both know from the plans. `present[i]` is
// false where the reader could not read chunk i (the receiver reads it
// itself, and meets the same error). The exchange sends it with `data`
// empty and the chunks' bytes right after it, raw, every chunk's bytes
// (filler for a missing one) back to back, so the receiver knows their
// size from the plans (read_once_exchange.h); `data`, where given, holds
// the present chunks back to back, a view into the bytes decoded (the
// probe between ranks carries its bytes in it).
struct ReadOnceBatch {
  std::vector<bool> present;
  std::string_view data;
};

// Load, every byte read once, with kAuto over storage reached through a
// link: what one rank measured, all-gathered so that every rank decides
// alike whether the rest goes rank to rank or from storage. Bytes read
// from storage (its share of the shared chunks) and in how long; bytes
// sent to one rank and received from another at once (the probe), and in
// how long. 0 bytes: nothing measured.
struct ReadOnceRates {
  uint64_t read_bytes = 0;
  uint64_t read_ns = 0;
  uint64_t probe_bytes = 0;
  uint64_t probe_ns = 0;
};

// Load, every byte read once by node (read_once_node.h): the invitation of
// a node's first rank to the memory its ranks share (empty: it has none);
// each other rank's answer, and every rank's word on whether its node
// shares one, in `opened`.
struct ReadOnceNodeMemory {
  std::string invitation;
  bool opened = false;
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

std::string EncodeReadOncePlan(const ReadOncePlan& m);
Result<ReadOncePlan> DecodeReadOncePlan(std::string_view bytes);
std::string EncodeReadOnceBatch(const ReadOnceBatch& m);
// The same message with `data` the concatenation of the parts, so that a
// sender's chunks are copied once, into the message.
std::string EncodeReadOnceBatch(const std::vector<bool>& present,
                                const std::vector<std::string_view>& data);
Result<ReadOnceBatch> DecodeReadOnceBatch(std::string_view bytes);
std::string EncodeReadOnceRates(const ReadOnceRates& m);
Result<ReadOnceRates> DecodeReadOnceRates(std::string_view bytes);
std::string EncodeReadOnceNodeMemory(const ReadOnceNodeMemory& m);
Result<ReadOnceNodeMemory> DecodeReadOnceNodeMemory(std::string_view bytes);

// Save step 2: what a rank holds (planner.h).
std::string EncodeOffer(const Offer& offer);
Result<Offer> DecodeOffer(std::string_view bytes);

// ---- Tiers and the runner (tier_messages.cc) ----

// A rank's outcome of a step every rank takes part in (Status crosses ranks
// as its code and message, never as text read back).
struct RankStatus {
  Status status;
};

std::string EncodeRankStatus(const RankStatus& m);
Result<RankStatus> DecodeRankStatus(std::string_view bytes);

// Every rank's `mine`, by rank (an all-gather of RankStatus).
Result<std::vector<Status>> AllGatherStatus(Communicator& comm,
                                            const Status& mine);
// `root`'s `mine` on every rank.
Result<RankStatus> BroadcastStatus(Communicator& comm, const Status& mine,
                                   int root);

// Tiers, opening: where a rank runs. `host`: the communicator's host name
// (which makes the nodes); `machine` and `pid`: the machine and process it
// really runs in, which tell whether two nodes would share a local root.
struct NodePlace {
  std::string host;
  std::string machine;
  int64_t pid = 0;
};

std::string EncodeNodePlace(const NodePlace& m);
Result<NodePlace> DecodeNodePlace(std::string_view bytes);

// Tiers, restore: what a node's local root holds, all-gathered: each
// share's committed step and each marker (with the world size that
// committed the step).
struct NodeShares {
  struct Item {
    bool marker = false;  // else a share's committed step
    int32_t rank = 0;     // the share's rank
    int64_t step = 0;
    int32_t world = 0;  // markers: the world size that marked the step
  };
  std::vector<Item> items;
};

std::string EncodeNodeShares(const NodeShares& m);
Result<NodeShares> DecodeNodeShares(std::string_view bytes);

// Tiers, restore: the durable tier's committed steps as rank 0 listed them,
// broadcast (or why it could not list them).
struct DurableSteps {
  Status status;
  std::vector<int64_t> steps;
};

std::string EncodeDurableSteps(const DurableSteps& m);
Result<DurableSteps> DecodeDurableSteps(std::string_view bytes);

// Tiers, local save: a rank's outcome, and its share's bytes (for the
// catalog's row) when it saved.
struct ShareOutcome {
  Status status;
  uint64_t bytes = 0;
};

std::string EncodeShareOutcome(const ShareOutcome& m);
Result<ShareOutcome> DecodeShareOutcome(std::string_view bytes);

// Tiers, restore at another world size: the entries of the old shares a
// rank read, all-gathered. A tensor is a box of its global tensor (offsets
// and lengths in each dimension); a blob or metadata entry has no box.
struct SharedEntry {
  int32_t share = 0;  // the old rank whose share holds it
  std::string name;
  EntryKind kind = EntryKind::kTensor;
  DType dtype = DType::kU8;
  std::vector<int64_t> offsets, lengths, global;
  bool piece = false;  // saved as a piece (else whole: replicated)
};

struct ShareEntries {
  std::vector<SharedEntry> entries;
};

std::string EncodeShareEntries(const ShareEntries& m);
// DataLoss also for a box whose offsets, lengths and global shape differ in
// rank.
Result<ShareEntries> DecodeShareEntries(std::string_view bytes);

// Tiers, restore at another world size: the old shares a rank needs that
// its node lacks, all-gathered.
struct LackingShares {
  std::vector<int64_t> shares;
};

std::string EncodeLackingShares(const LackingShares& m);
Result<LackingShares> DecodeLackingShares(std::string_view bytes);

// Tiers, a step copied between ranks (tier_transfer.h): one SendRecv
// message of the stream.
struct TransferPart {
  enum class Kind : uint8_t {
    kObject,  // an object of the step begins: `key`, `size`
    kData,    // the next bytes of that object: `data`
    kEnd,     // every object was sent: commit
    kFailed,  // the sender failed (`failed`): drop what came
  };
  Kind kind = Kind::kEnd;
  std::string key;
  uint64_t size = 0;
  // A view, so that a block of data is not copied again on either side:
  // into the sender's buffer, or into the bytes a part was decoded from
  // (valid while they are).
  std::string_view data;
  Status failed;
};

std::string EncodeTransferPart(const TransferPart& m);
Result<TransferPart> DecodeTransferPart(std::string_view bytes);

// The job runner, each step: a rank's wishes (all-gathered; `time_due` is
// rank 0's clock's).
struct RunnerVote {
  bool preempt = false;
  bool stop = false;
  bool time_due = false;
};

std::string EncodeRunnerVote(const RunnerVote& m);
Result<RunnerVote> DecodeRunnerVote(std::string_view bytes);

// The job runner, starting: the step to resume from as rank 0 found it
// (none: a fresh job), or why it could not, broadcast.
struct ResumeStep {
  Status status;
  std::optional<int64_t> step;
};

std::string EncodeResumeStep(const ResumeStep& m);
Result<ResumeStep> DecodeResumeStep(std::string_view bytes);

}  // namespace ckpt
