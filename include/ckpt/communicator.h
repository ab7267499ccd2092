// How the ranks of a job talk to each other during a save or a load.
//
// ckpt needs little: rank and size, each rank's host name, a barrier, an
// all-gather and a broadcast of bytes; tiers (ckpt/tiered.h) also send bytes
// from one rank to another. Implementations: one process
// (NewLocalCommunicator), ranks as threads (NewThreadCommunicators, for tests)
// and MPI (ckpt/mpi_communicator.h, built when MPI is found).
//
// Every rank must make the same sequence of collective calls. A call that
// fails on one rank fails (or aborts) on every rank.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/status.h"

namespace ckpt {

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This rank's host name (recorded in the manifest). At most 255 bytes
  // with the indexed metadata layout (docs/format.md section 8.3): a save
  // whose ranks report a longer one fails at the commit.
  virtual std::string host_name() const;

  virtual Status Barrier() = 0;
  // Every rank contributes `mine`; every rank receives all of them, by rank.
  virtual Result<std::vector<std::string>> AllGather(std::string_view mine) = 0;
  // Every rank receives `root`'s `data` (other ranks' `data` is ignored).
  virtual Result<std::string> Broadcast(std::string_view data, int root) = 0;

  // Point to point: sends `data` to rank `dest` and receives one message
  // from rank `source`, at once (as MPI_Sendrecv), so ranks that pass
  // messages around a ring cannot deadlock. -1 for `dest` sends nothing,
  // -1 for `source` receives nothing (and returns ""). Messages between two
  // ranks arrive in the order they were sent; a send may wait until its
  // receiver takes an earlier one, so memory stays bounded. Unlike the
  // collectives, only the two ranks of a message take part. Default:
  // Unavailable (a communicator of the caller's that cannot do it; tiers
  // need it, single-root saves do not).
  virtual Result<std::string> SendRecv(std::string_view data, int dest,
                                       int source);

  // Bulk bytes whose size the receiver knows (a read-once load's chunks,
  // framed by a message sent just before): as SendRecv and Broadcast, but
  // received straight into the caller's memory, so a large transfer needs
  // no memory of its own. The message from `source` (the root's `data`)
  // must be exactly `into.size()` (`data.size()`) bytes: DataLoss
  // otherwise, and the bytes are lost. Defaults: through SendRecv and
  // Broadcast, copied.
  virtual Status SendRecvInto(std::span<const std::byte> data, int dest,
                              std::span<std::byte> into, int source);
  virtual Status BroadcastInto(std::span<std::byte> data, int root);

  // Gives up on the group: collectives waiting on any rank (and later ones)
  // fail with `why`. For a rank that cannot take part any more (it threw);
  // the MPI implementation aborts the job, as MPI offers nothing gentler.
  virtual void Abort(Status why) {}

 protected:
  Communicator() = default;
};

// A single process: rank 0 of 1.
std::unique_ptr<Communicator> NewLocalCommunicator();

// `size` ranks as threads of one process (for tests and single-node use):
// communicator r is used by the thread that plays rank r. Thread-safe across
// the group; each communicator is used by one thread at a time.
std::vector<std::unique_ptr<Communicator>> NewThreadCommunicators(int size);

}  // namespace ckpt
