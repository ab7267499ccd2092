// The exchange of a read-once load (read_once.h): which chunks go from
// which rank to which, cut into batches, and how a batch moves: its header
// message, then the chunks' bytes straight between the memories the ranks
// hold them in (held_chunks.h).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/held_chunks.h"
#include "checkpoint/read_once.h"
#include "ckpt/communicator.h"
#include "format/manifest.h"
#include "messages/messages.h"

namespace ckpt::read_once {

// One shared chunk and the ranks that need it.
struct Shared {
  ChunkId id;
  std::vector<int> ranks;  // that need it, ascending
  // The first place any rank reads it from (ReadOncePlan::Place).
  std::pair<uint64_t, uint64_t> place{UINT64_MAX, UINT64_MAX};
};

// Chunks that lie back to back in their object and that the same ranks
// need, [begin, end) of a list of shared chunks sorted by place, `bytes`
// in all.
struct Run {
  size_t begin, end;
  uint64_t bytes;
};

// `shared`, sorted by place, cut into runs of at most `max_bytes` (or one
// chunk).
std::vector<Run> CutRuns(const std::vector<Shared*>& shared,
                         uint64_t max_bytes);

// Each run's reader, one of the ranks that need it. The runs that the same
// ranks need are dealt out among them in blocks that lie back to back, so
// that each reader sends its share in few large messages (Batches), sized
// so that what each node reads in all (its ranks share its link to
// storage), then each of its ranks (`reads`, which comes in holding what
// each reads already, and goes out with the runs added), comes out as even
// as can be: larger sets of runs first, each node's part, then each rank's
// block, filling it up to a common level. `node_of`: each rank's node.
std::vector<int> DealRuns(const std::vector<Shared*>& shared,
                          const std::vector<Run>& runs,
                          const std::vector<int>& node_of,
                          std::vector<uint64_t>& reads);

// `items` in the order of their places, cut into messages of at most
// kBatchBytes (or one chunk) of chunks that lie back to back in their
// object: such a message goes out of, and into, the memory the chunks are
// held in (HeldChunks keeps them as their objects lay them out) without a
// copy. Every rank cuts the same lists alike.
std::vector<std::vector<const Shared*>> Batches(
    std::vector<const Shared*> items);

// What one rank sends to and receives from each other rank in one phase of
// the exchange, in the order both sides list them.
struct Transfers {
  explicit Transfers(int world) : send(world), receive(world) {}
  std::vector<std::vector<const Shared*>> send, receive;
};

// Moves batches of chunks between ranks: each batch is a header message
// (which of its chunks the sender holds; one it could not read goes as
// missing) and then the chunks' bytes, missing ones as filler, so that the
// receiver knows every size from the plans and takes the bytes straight
// into the memory they are held in.
class Mover {
 public:
  Mover(Communicator& comm, HeldChunks& held, const format::Manifest& manifest,
        const std::map<ChunkId, std::vector<const NeededChunk*>>& places,
        std::map<ChunkId, const std::byte*>& bytes_of)
      : comm_(comm),
        held_(held),
        manifest_(manifest),
        places_(places),
        bytes_of_(bytes_of) {}

  uint64_t received() const { return received_; }

  // Where this rank keeps chunk `id` (its first place).
  std::byte* Home(const ChunkId& id) const;
  // Whether this rank holds chunk `id`.
  bool Holds(const ChunkId& id) const { return bytes_of_.count(id) > 0; }
  // Chunk `id` is held at its home (put there by another rank of the
  // node, which shares the memory): counted as `received` if this rank did
  // not hold it.
  void Mark(const ChunkId& id, bool received);

  // Which of `chunks` this rank holds (the batch's header), and their bytes
  // in `payload`: where they are held when every one is there, back to
  // back; else gathered.
  std::vector<bool> Pack(const std::vector<const Shared*>& chunks,
                         std::span<const std::byte>& payload);

  // Where the bytes of `expected` are received: their homes when those
  // lie back to back, else a buffer they are copied out of (Take).
  std::span<std::byte> Landing(const std::vector<const Shared*>& expected);

  // Checks the header `got` from `source` against `expected` (as its plan
  // says) and takes the present chunks, received at `landing`. A batch
  // that does not match gives up on the communicator.
  Status Take(const Result<std::string>& got,
              const std::vector<const Shared*>& expected,
              std::span<const std::byte> landing, int source);

  // The payload of a batch did not arrive whole.
  Status Lost(const Status& why, const std::string& what);

 private:
  static uint64_t SizeOf(const std::vector<const Shared*>& chunks);
  // `buffer`, grown to at least `size` bytes (its old bytes not kept).
  static std::byte* Buffer(std::unique_ptr<std::byte[]>& buffer,
                           uint64_t& capacity, uint64_t size);

  Communicator& comm_;
  HeldChunks& held_;
  const format::Manifest& manifest_;
  const std::map<ChunkId, std::vector<const NeededChunk*>>& places_;
  std::map<ChunkId, const std::byte*>& bytes_of_;
  std::unique_ptr<std::byte[]> out_, in_;
  uint64_t out_size_ = 0, in_size_ = 0;
  uint64_t received_ = 0;
};

// One phase: in round k, to rank + k and from rank - k, a batch at a time
// (Batches). Sends the chunks this rank holds (the others as missing);
// takes what arrives.
Status Exchange(Communicator& comm, const Transfers& t, Mover& mover);

// The chunks every rank needs, `everyone[r]` those rank r read, passed
// round `ring` (every rank once, those of a node side by side): in each of
// world - 1 steps every rank sends one reader's share to the next rank and
// takes another from the one before, so that all the links carry bytes at
// once, and a byte crosses between nodes at most once a node. For large
// shares; see BroadcastEach for small ones.
Status RingEach(Communicator& comm,
                const std::vector<std::vector<const Shared*>>& everyone,
                const std::vector<int>& ring, Mover& mover);

// The chunks every rank needs, `everyone[r]` those rank r read: broadcast
// (the communicator's own, which MPI spreads over the nodes), reader by
// reader.
Status BroadcastEach(Communicator& comm,
                     const std::vector<std::vector<const Shared*>>& everyone,
                     Mover& mover);

}  // namespace ckpt::read_once
