// A read-once load (read_once.h) whose ranks of one host hold the chunks
// they need once for all of them: where every rank needs the same chunks
// (a replicated state), the ranks of a node map one SharedMemoryFile as
// their HeldChunks, each reads its share of the reading into it, and only
// the first rank of each node (its leader) exchanges the node's chunks
// with the other nodes' leaders, round a ring of them. The other ranks of
// the node send and receive nothing but two short messages: a node
// receives each byte it lacks once, not once per rank, and holds it once
// (docs/design.md, "Every byte read once").
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "checkpoint/read_once_exchange.h"
#include "ckpt/communicator.h"
#include "util/shared_memory.h"

namespace ckpt::read_once {

// The memory the ranks of `node` (this rank's node, ascending; its first
// the leader) share: the leader creates a file of `size` bytes and sends
// its name to the others, which open it and say whether they could. Every
// rank of `comm` calls it together. The file comes back on every rank only
// where every node of several ranks has one (a node whose ranks cannot
// share it, e.g. no room in /dev/shm, or a host name that two hosts
// carry, makes every rank of the job hold its own); a rank alone on its
// node gets none either way, and holds its own. Its pages are not yet
// taken: each rank reserves those it reads into (SharedMemoryFile::Reserve)
// and the leader the rest, in the background (ExchangeByNode waits for
// them before it writes there).
Result<std::optional<SharedMemoryFile>> ShareNodeMemory(
    Communicator& comm, const std::vector<int>& node, uint64_t size,
    bool& shared);

// Of the chunks read by ranks of other nodes (`everyone[r]`, those rank r
// reads), those that each rank of this node reads itself where the node
// reads them from storage rather than from the other nodes: dealt out
// among the ranks of `node`, each a run of chunks side by side, evening out
// the bytes. Indexed as `node`.
std::vector<std::vector<const Shared*>> DealToNode(
    const std::vector<int>& node, const std::vector<int>& node_of,
    const std::vector<std::vector<const Shared*>>& everyone);

// After the ranks of `node` have read their chunks (`read[i]`, those of
// `node[i]`) into the node's memory: each tells the leader which of them
// it holds; where `ring` is not empty (the nodes' leaders, in order), the
// leaders pass their nodes' chunks round it (RingEach: `everyone[r]` those
// that rank r read); then the leader copies `copies` (chunks kept at more
// than one place) and tells the others which of `all` the node holds. The
// ranks mark what they hold in `mover`. With `memory` (the node's, from
// ShareNodeMemory), the ranks wait for each other asleep on its locks
// before they receive.
Status ExchangeByNode(Communicator& comm, const std::vector<int>& node,
                      const std::vector<std::vector<const Shared*>>& read,
                      const std::vector<int>& ring,
                      const std::vector<std::vector<const Shared*>>& everyone,
                      const std::vector<const Shared*>& all,
                      const std::function<void()>& copies,
                      SharedMemoryFile* memory, Mover& mover);

}  // namespace ckpt::read_once
