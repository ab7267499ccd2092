/* The MPI communicator for the C API, in a library of its own
 * (libckpt_mpi.so), so that libckpt.so and the Python package work on a
 * machine without Open MPI: only a program that asks for MPI loads it.
 *
 *   char* err = NULL;
 *   ckpt_communicator_t* world = NULL;
 *   ckpt_mpi_communicator_create(&world, &err);
 *   ckpt_options_set_communicator(opts, world);
 *   ...
 *   ckpt_communicator_destroy(world);
 *   ckpt_mpi_finalize();
 */
#ifndef CKPT_C_MPI_H_
#define CKPT_C_MPI_H_

#include "ckpt/c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ranks of MPI_COMM_WORLD. Initializes MPI (MPI_THREAD_SERIALIZED: an
 * asynchronous save runs its collectives on a thread of its own) unless
 * something else already did. CKPT_FAILED_PRECONDITION when MPI was
 * finalized, CKPT_UNAVAILABLE when it cannot start. */
CKPT_EXPORT int ckpt_mpi_communicator_create(ckpt_communicator_t** out,
                                             char** errptr);

/* Finalizes MPI if ckpt_mpi_communicator_create initialized it (and it is
 * not finalized yet); else does nothing. */
CKPT_EXPORT void ckpt_mpi_finalize(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CKPT_C_MPI_H_ */
