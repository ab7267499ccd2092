// The MPI communicator: ranks are the processes of an MPI communicator.
// Built (library target `ckpt_mpi`) when CMake finds MPI.
//
// The caller initializes MPI (MPI_Init or MPI_Init_thread) before creating
// it and finalizes MPI after the last ckpt call. ckpt makes MPI calls from
// the thread that calls the manager (Save, Load, ...), except for SaveAsync:
// its collectives run on the manager's background save thread while the
// caller goes on. A job that uses SaveAsync therefore initializes MPI with
// MPI_Init_thread and at least MPI_THREAD_SERIALIZED (ckpt never makes two
// MPI calls at once: every other call of the manager waits for the save in
// flight), and MPI_THREAD_MULTIPLE if its own threads make MPI calls while
// a save is in flight.
#pragma once

#include <mpi.h>

#include <memory>

#include "ckpt/communicator.h"

namespace ckpt {

struct MpiCommunicatorOptions {
  // How long one call (a collective, or a SendRecv) waits for the ranks it
  // needs before it fails with Unavailable, naming the ranks it heard
  // nothing from and their hosts: a node that stopped, or a network
  // partition, then ends the call on every rank in about this time instead
  // of never. Set it above the longest a rank may wait in a collective for
  // the others' work (a save waits for the slowest rank's writes). 0: wait
  // as long as it takes (MPI's own collectives).
  //
  // With a timeout, creating the communicator is a collective (it gathers
  // the ranks' host names, to name them), and collectives go point to
  // point, each rank to every other: O(size) messages per rank and call,
  // for jobs of up to some hundreds of ranks. A timed SendRecv sends a copy
  // of its message (the caller's bytes may be gone when a late rank takes
  // it).
  //
  // After a timeout every later call of the communicator fails at once with
  // the same error: the job cannot go on with collectives. The late rank's
  // messages may still come, at any time, and go nowhere the program or ckpt
  // uses: what the failed call posted is cancelled, or completes into
  // buffers the communicator keeps (until it is destroyed after
  // MPI_Finalize, or for good if before). What a rank may still do:
  // - local work: a save to, or a load from, storage of its own, with a
  //   manager without a communicator (or a single-process one);
  // - destroy the communicator, and exit with or without MPI_Finalize
  //   (MPI_Finalize waits for every rank, and may wait forever on one that
  //   is cut off; exit without it, or MPI_Abort, if a rank may be gone).
  // Not: a new ckpt communicator over the same `comm`, where the late
  // rank's messages wait under ckpt's tags (0x636b to 0x636e) and would be
  // taken for new ones. A new MPI communicator has none of them (an
  // MPI_Comm_dup by every rank, once they all reach each other again).
  double timeout_seconds = 0;
};

// Uses (does not duplicate or free) `comm`.
std::unique_ptr<Communicator> NewMpiCommunicator(
    MPI_Comm comm = MPI_COMM_WORLD, const MpiCommunicatorOptions& options = {});

}  // namespace ckpt
