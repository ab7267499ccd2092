#include "checkpoint/read_once_node.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <tuple>
#include <utility>

#include "messages/messages.h"
#include "util/log.h"

namespace ckpt::read_once {

namespace {

// The locks on the node's memory by which its ranks wait for each other
// asleep, where a blocking receive would spin (an MPI job's does, and on
// a node with more ranks than cores the spinning ranks slow the ones they
// wait for): the leader holds kLeaderBusy until the node holds what it
// needs; each other rank holds kReading until it has read its part. The
// messages still carry what is held; a lock only says when to receive.
constexpr int kLeaderBusy = 0;
constexpr int kReading = 1;

// A message from `source` that does not decode breaks the protocol: this
// rank gives up on the communicator (its partners would wait for ever).
Status Broken(Communicator& comm, int source, const Status& why) {
  const Status out = DataLossError(
      "read once: rank " + std::to_string(source) +
      " sent a message about its node's memory that does not decode (" +
      why.ToString() + ")");
  comm.Abort(out);
  return out;
}

}  // namespace

Result<std::optional<SharedMemoryFile>> ShareNodeMemory(
    Communicator& comm, const std::vector<int>& node, uint64_t size,
    bool& shared) {
  const int me = comm.rank();
  std::optional<SharedMemoryFile> file;
  bool ok = true;
  if (node.size() > 1) {
    const std::string what = "read once: the memory of the node of ranks " +
                             std::to_string(node.front()) + " to " +
                             std::to_string(node.back());
    if (me == node.front()) {
      Result<SharedMemoryFile> made = SharedMemoryFile::Create(size);
      if (made.ok()) {
        file.emplace(std::move(*made));
        // Held until the node holds what it needs: the others wait on it
        // asleep (ExchangeByNode).
        file->Lock(kLeaderBusy, /*exclusive=*/true, /*wait=*/false);
      } else {
        ok = false;
        LogInfo(what + ": each rank holds its own (" +
                made.status().ToString() + ")");
      }
      const std::string invitation = EncodeReadOnceNodeMemory(
          {.invitation = file ? file->Invitation() : ""});
      for (size_t i = 1; i < node.size(); ++i) {
        Result<std::string> sent = comm.SendRecv(invitation, node[i], -1);
        if (!sent.ok()) return sent.status().WithContext(what);
      }
      for (size_t i = 1; i < node.size(); ++i) {
        Result<std::string> said =
            comm.SendRecv(EncodeReadOnceNodeMemory({}), -1, node[i]);
        if (!said.ok()) return said.status().WithContext(what);
        Result<ReadOnceNodeMemory> answer = DecodeReadOnceNodeMemory(*said);
        if (!answer.ok()) return Broken(comm, node[i], answer.status());
        ok = ok && answer->opened;
      }
      // Every other rank of the node has it open, or will not: the name
      // can go now, not after the job-wide word below, which waits for
      // the slowest rank of every node; a job killed meanwhile would leave
      // it in /dev/shm.
      if (file) file->Unlink();
    } else {
      Result<std::string> got =
          comm.SendRecv(EncodeReadOnceNodeMemory({}), -1, node.front());
      if (!got.ok()) return got.status().WithContext(what);
      Result<ReadOnceNodeMemory> invitation = DecodeReadOnceNodeMemory(*got);
      if (!invitation.ok()) {
        return Broken(comm, node.front(), invitation.status());
      }
      if (!invitation->invitation.empty()) {
        Result<SharedMemoryFile> opened =
            SharedMemoryFile::Open(invitation->invitation, size);
        if (opened.ok()) {
          file.emplace(std::move(*opened));
          // Held until this rank has read its part: the leader waits on it
          // asleep (ExchangeByNode).
          file->Lock(kReading, /*exclusive=*/false, /*wait=*/false);
        } else {
          LogInfo(what + ": rank " + std::to_string(me) + " holds its own (" +
                  opened.status().ToString() + ")");
        }
      }
      Result<std::string> said =
          comm.SendRecv(EncodeReadOnceNodeMemory({.opened = file.has_value()}),
                        node.front(), -1);
      if (!said.ok()) return said.status().WithContext(what);
    }
  }
  // Every node shares, or none: the nodes' leaders exchange for their
  // nodes only where every rank's node holds what the others need.
  CKPT_ASSIGN_OR_RETURN(
      std::vector<std::string> all,
      comm.AllGather(EncodeReadOnceNodeMemory({.opened = ok})));
  shared = true;
  for (size_t r = 0; r < all.size(); ++r) {
    Result<ReadOnceNodeMemory> word = DecodeReadOnceNodeMemory(all[r]);
    if (!word.ok()) return Broken(comm, static_cast<int>(r), word.status());
    shared = shared && word->opened;
  }
  if (!shared) return std::optional<SharedMemoryFile>();
  // The leader takes the pages the node receives while the ranks read
  // their shares (each taking the pages of its own first): on a host of
  // several nodes taking them took as long as the reads.
  if (file && me == node.front()) file->ReserveAllInBackground();
  return file;
}

std::vector<std::vector<const Shared*>> DealToNode(
    const std::vector<int>& node, const std::vector<int>& node_of,
    const std::vector<std::vector<const Shared*>>& everyone) {
  std::vector<const Shared*> rest;
  for (size_t r = 0; r < everyone.size(); ++r) {
    if (node_of[r] == node_of[node.front()]) continue;
    rest.insert(rest.end(), everyone[r].begin(), everyone[r].end());
  }
  std::stable_sort(rest.begin(), rest.end(), [](auto* a, auto* b) {
    return std::tie(a->place, a->id) < std::tie(b->place, b->id);
  });
  uint64_t total = 0;
  for (const Shared* s : rest) total += s->id.length;
  // In place order, each rank a block of about total / ranks bytes.
  std::vector<std::vector<const Shared*>> out(node.size());
  const uint64_t each =
      std::max<uint64_t>(1, (total + node.size() - 1) / node.size());
  uint64_t dealt = 0;
  for (const Shared* s : rest) {
    const size_t i = std::min<size_t>(node.size() - 1, dealt / each);
    out[i].push_back(s);
    dealt += s->id.length;
  }
  return out;
}

namespace {

// Which of `chunks` this rank holds (a batch header's, with no bytes).
std::vector<bool> Holding(const std::vector<const Shared*>& chunks,
                          const Mover& mover) {
  std::vector<bool> present;
  present.reserve(chunks.size());
  for (const Shared* s : chunks) present.push_back(mover.Holds(s->id));
  return present;
}

// Marks those of `chunks` that the header `got` from `source` says it
// holds. One that does not match the plans gives up on the communicator.
Status Mark(const Result<std::string>& got,
            const std::vector<const Shared*>& chunks, int source, bool received,
            const std::string& what, Communicator& comm, Mover& mover) {
  if (!got.ok()) return got.status().WithContext(what);
  Result<ReadOnceBatch> batch = DecodeReadOnceBatch(*got);
  if (!batch.ok() || batch->present.size() != chunks.size() ||
      !batch->data.empty()) {
    const Status why = DataLossError(
        "read once: rank " + std::to_string(source) +
        " said it holds chunks that its node's plan does not name");
    comm.Abort(why);
    return why;
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (batch->present[i]) mover.Mark(chunks[i]->id, received);
  }
  return Status();
}

}  // namespace

Status ExchangeByNode(Communicator& comm, const std::vector<int>& node,
                      const std::vector<std::vector<const Shared*>>& read,
                      const std::vector<int>& ring,
                      const std::vector<std::vector<const Shared*>>& everyone,
                      const std::vector<const Shared*>& all,
                      const std::function<void()>& copies,
                      SharedMemoryFile* memory, Mover& mover) {
  const int me = comm.rank();
  const int leader = node.front();
  const std::string what =
      "read once: within the node of rank " + std::to_string(leader);
  if (me == leader) {
    // Where the leader's time goes (CKPT_LOG=info): the node's ranks
    // reading, the memory's pages, the ring, the copies.
    using Clock = std::chrono::steady_clock;
    std::vector<Clock::time_point> at = {Clock::now()};
    if (memory != nullptr &&
        memory->Lock(kReading, /*exclusive=*/true, /*wait=*/true)) {
      memory->Unlock(kReading);
    }
    for (size_t i = 1; i < node.size(); ++i) {
      CKPT_RETURN_IF_ERROR(
          Mark(comm.SendRecv(EncodeReadOnceBatch({}), -1, node[i]), read[i],
               node[i], /*received=*/false, what, comm, mover));
    }
    // The pages the leader writes (received, or copied to other places).
    // No room for them, though there was when the memory was made: every
    // rank fails, as it would for a lost message.
    at.push_back(Clock::now());
    if (memory != nullptr) {
      if (Status room = memory->WaitReserved(); !room.ok()) {
        const Status out = room.WithContext(what);
        comm.Abort(out);
        return out;
      }
    }
    at.push_back(Clock::now());
    if (!ring.empty()) {
      CKPT_RETURN_IF_ERROR(RingEach(comm, everyone, ring, mover));
    }
    at.push_back(Clock::now());
    copies();
    at.push_back(Clock::now());
    if (LogEnabled(LogLevel::kInfo)) {
      std::string took;
      const char* phase[] = {"waiting for the node's reads",
                             "waiting for the pages", "on the ring",
                             "copying within the node's memory"};
      for (size_t i = 1; i < at.size(); ++i) {
        took += (i > 1 ? ", " : "") +
                std::to_string(
                    std::chrono::duration<double>(at[i] - at[i - 1]).count()) +
                " s " + phase[i - 1];
      }
      LogInfo(what + ": the leader's time: " + took);
    }
    const std::string held = EncodeReadOnceBatch(Holding(all, mover), {});
    if (memory != nullptr) memory->Unlock(kLeaderBusy);
    for (size_t i = 1; i < node.size(); ++i) {
      Result<std::string> sent = comm.SendRecv(held, node[i], -1);
      if (!sent.ok()) return sent.status().WithContext(what);
    }
    return Status();
  }
  const size_t at = static_cast<size_t>(
      std::find(node.begin(), node.end(), me) - node.begin());
  if (memory != nullptr) memory->Unlock(kReading);
  Result<std::string> sent = comm.SendRecv(
      EncodeReadOnceBatch(Holding(read[at], mover), {}), leader, -1);
  if (!sent.ok()) return sent.status().WithContext(what);
  if (memory != nullptr &&
      memory->Lock(kLeaderBusy, /*exclusive=*/false, /*wait=*/true)) {
    memory->Unlock(kLeaderBusy);
  }
  // What the node holds (this rank's own reads among it): the rest came
  // from its other ranks and from the other nodes.
  return Mark(comm.SendRecv(EncodeReadOnceBatch({}), -1, leader), all, leader,
              /*received=*/true, what, comm, mover);
}

}  // namespace ckpt::read_once
