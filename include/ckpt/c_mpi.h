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

/* As ckpt_mpi_communicator_create, with a timeout: each call between ranks
 * (a collective) waits at most `timeout_seconds`
 * for the ranks it needs, then fails with CKPT_UNAVAILABLE and a message
 * naming the ranks it heard nothing from, their hosts, and which of them
 * answer no ping (unreachable or stopped). A node that stopped, or a
 * network partition, then ends a save or load on every rank in about this
 * time instead of never. Set it above the longest a rank may wait in a
 * collective for the others' work (a save waits for the slowest rank's
 * writes). 0: wait as long as it takes, as ckpt_mpi_communicator_create;
 * CKPT_INVALID_ARGUMENT below 0 or not a number.
 *
 * With a timeout, creating the communicator is a collective (every rank
 * calls it), and after a timeout every later call fails at once with the
 * same error: the job cannot go on, and MPI_Finalize (ckpt_mpi_finalize)
 * may wait forever on a rank it cannot reach, so exit without it.
 * (MpiCommunicatorOptions::timeout_seconds, ckpt/mpi_communicator.h.) */
CKPT_EXPORT int ckpt_mpi_communicator_create_with_timeout(
    double timeout_seconds, ckpt_communicator_t** out, char** errptr);

/* Finalizes MPI if ckpt_mpi_communicator_create initialized it (and it is
 * not finalized yet); else does nothing. */
CKPT_EXPORT void ckpt_mpi_finalize(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CKPT_C_MPI_H_ */
