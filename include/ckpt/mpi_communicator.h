// The MPI communicator: ranks are the processes of an MPI communicator.
// Built (library target `ckpt_mpi`) when CMake finds MPI.
//
// The caller initializes MPI (MPI_Init or MPI_Init_thread) before creating
// it and finalizes MPI after the last ckpt call. ckpt makes MPI calls only
// from the thread that calls Save or Load.
#pragma once

#include <mpi.h>

#include <memory>

#include "ckpt/communicator.h"

namespace ckpt {

// Uses (does not duplicate or free) `comm`.
std::unique_ptr<Communicator> NewMpiCommunicator(
    MPI_Comm comm = MPI_COMM_WORLD);

}  // namespace ckpt
