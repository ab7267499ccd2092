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
  // for jobs of up to some hundreds of ranks. After a timeout every later
  // call fails at once with the same error; the job cannot go on, and
  // MPI_Finalize may wait forever on a rank it cannot reach, so exit
  // without it (or MPI_Abort).
  double timeout_seconds = 0;
};

// Uses (does not duplicate or free) `comm`.
std::unique_ptr<Communicator> NewMpiCommunicator(
    MPI_Comm comm = MPI_COMM_WORLD, const MpiCommunicatorOptions& options = {});

}  // namespace ckpt
