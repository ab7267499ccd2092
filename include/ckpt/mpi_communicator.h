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

// Uses (does not duplicate or free) `comm`.
std::unique_ptr<Communicator> NewMpiCommunicator(
    MPI_Comm comm = MPI_COMM_WORLD);

}  // namespace ckpt
