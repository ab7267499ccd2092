// Every byte read once (docs/design.md, "Every byte read once"): on a load
// with many ranks, a chunk that several ranks need is read from storage by
// one of them and sent to the others, so that a job whose ranks share data
// (a replicated state, a reshard whose boxes straddle the saved pieces)
// reads each stored byte once, not once per rank that needs it.
//
// The rule (docs/design.md, "Every byte read once", says it whole and why),
// computed alike on every rank from the all-gathered plans: a chunk one
// rank needs, that rank reads; chunks several need are cut into runs that
// lie back to back, dealt out among the ranks that need them in blocks
// that lie back to back, evening out what each reads, and sent straight to
// the ranks of its node and to one relay on each other node, which passes
// it on (runs every rank needs go round a ring of the ranks instead, or
// are broadcast where the shares are small; where every rank needs the
// same chunks, the ranks of a node hold them once, in shared memory, and
// only the nodes' leaders exchange: read_once_node.h); a chunk its reader
// could not read is sent as missing, and whoever needs it reads it itself.
// A rank holds the chunks it needs in memory laid out as the objects are
// (held_chunks.h), received straight into it; holding them all, the load
// checks them there and copies them once. Off for one rank, with
// LoadOptions::ReadOnce::kOff or CKPT_READ_ONCE=off, and when a rank's
// communicator cannot send. With kAuto, also where it cannot pay: when a
// rank's storage reads are local (StorageCapabilities::local_reads: a
// local disk's page cache or memory, read at memory speed, where a byte
// sent costs more than a byte read again), on one host over a storage
// that hands its objects over in place (the page cache already shares
// them), and where the ranks measure storage more than twice as fast as
// the way between them (each times the first of its share from storage
// and a probe to another rank; then every rank reads the rest it needs
// itself).
#pragma once

#include <memory>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "ckpt/communicator.h"
#include "ckpt/storage.h"
#include "data/reader.h"
#include "format/manifest.h"

namespace ckpt {

class ThreadPool;

// A chunk this rank's load reads, with the entry it belongs to.
struct NeededChunk {
  const format::EntryRecord* entry = nullptr;
  const format::ChunkRecord* chunk = nullptr;
};

// Whether a load with `load` on `comm` from `storage` may share its reads
// (not yet whether any rank can send, or whether it pays: ShareReads finds
// that out with the plans). kAuto over a storage whose reads are local
// does not: every rank reads for itself without a word to the others
// (the ranks of a job open one root, so they agree; as they must on
// LoadOptions::read_once and CKPT_READ_ONCE).
bool ReadOnceWanted(const LoadOptions& load, const Communicator& comm,
                    const Storage& storage);

// The chunks that the boxes (`offsets`, `lengths`) of `entry` meet,
// appended to `out`.
Status AddNeededChunks(const format::EntryRecord& entry,
                       const std::vector<int64_t>& offsets,
                       const std::vector<int64_t>& lengths,
                       std::vector<NeededChunk>& out);

// What ShareReads arranged for this rank.
struct SharedReads {
  // Another rank failed before it knew what it needs: this rank reads
  // nothing more (that rank's own vote fails the step).
  bool another_failed = false;
  // Reads through this storage get the shared chunks this rank needs from
  // memory (sent by their readers, or read by this rank for others) and
  // everything else from the root's storage. Null where nothing is shared:
  // read from the root's storage as without. Holding every chunk the rank
  // needs, it offers views of them (held_chunks.h), which the load uses
  // after this returns: it keeps this alive until it is done.
  std::shared_ptr<Storage> storage;
  uint64_t read_for_others = 0;  // bytes of chunks this rank read and sent
  uint64_t received = 0;         // bytes of chunks other ranks sent it
};

// Every rank of `comm` calls it together, at the same step: `mine` lists
// the chunks this rank needs (null: it failed before it knew); `mode` is
// the load's (kAuto or kOn). Reads this
// rank's share of the shared chunks from `storage` (on `pool`) and
// exchanges them. Fails only where the communicator failed, or where a
// rank sent what the plans do not say (after giving up on `comm`: its
// partners would wait for messages that never come).
Result<SharedReads> ShareReads(Communicator& comm, Storage& storage,
                               LoadOptions::ReadOnce mode,
                               const format::Manifest& manifest,
                               const std::vector<NeededChunk>* mine,
                               ThreadPool* pool);

}  // namespace ckpt
