/* The C API's MPI communicator with a timeout, under mpirun with 2 ranks or
 * more: rank 1 stays away from a barrier for longer than the timeout, and
 * every other rank's barrier fails with CKPT_UNAVAILABLE within the
 * timeout and a second of pings, naming rank 1 as the rank that does not
 * answer. A negative timeout is refused before MPI starts.
 *
 *   mpirun -np 2 c_mpi_check SECONDS
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/c.h"
#include "ckpt/c_mpi.h"

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int failures = 0;

static void Check(int ok, int rank, const char* what, const char* detail) {
  if (!ok) {
    fprintf(stderr, "rank %d: FAILED: %s: %s\n", rank, what,
            detail ? detail : "");
    ++failures;
  }
}

int main(int argc, char** argv) {
  const double timeout = argc > 1 ? atof(argv[1]) : 0;
  if (timeout <= 0) {
    fprintf(stderr, "usage: mpirun -np N c_mpi_check SECONDS\n");
    return 2;
  }
  char* err = NULL;
  ckpt_communicator_t* comm = NULL;
  int rc = ckpt_mpi_communicator_create_with_timeout(-1, &comm, &err);
  Check(rc == CKPT_INVALID_ARGUMENT && comm == NULL && err != NULL &&
            strstr(err, "timeout_seconds") != NULL,
        -1, "a negative timeout is refused, naming it", err);
  ckpt_free(err);
  err = NULL;
  rc = ckpt_mpi_communicator_create_with_timeout(timeout, &comm, &err);
  if (rc != CKPT_OK) {
    fprintf(stderr, "c_mpi_check: %s\n", err ? err : "?");
    return 1;
  }
  const int rank = ckpt_communicator_rank(comm);
  if (ckpt_communicator_size(comm) < 2) {
    fprintf(stderr, "c_mpi_check: run it with 2 ranks or more\n");
    return 2;
  }
  if (rank == 1) {
    /* Away for longer than the others wait; then a barrier of its own,
     * which fails too (the others left theirs), so that every rank reaches
     * MPI_Finalize. */
    const struct timespec away = {(time_t)(2 * timeout + 1), 0};
    nanosleep(&away, NULL);
    (void)ckpt_communicator_barrier(comm, &err);
    ckpt_free(err);
  } else {
    const double start = Now();
    rc = ckpt_communicator_barrier(comm, &err);
    const double took = Now() - start;
    Check(rc == CKPT_UNAVAILABLE, rank,
          "the barrier without rank 1 fails "
          "with CKPT_UNAVAILABLE",
          err);
    Check(err != NULL && strstr(err, "rank 1 (") != NULL &&
              strstr(err, "does not answer a ping") != NULL,
          rank, "the error names rank 1 as not answering", err);
    char seconds[64];
    snprintf(seconds, sizeof(seconds), "took %.2f s", took);
    Check(took >= timeout && took < timeout + 1 + 5, rank,
          "it failed after the timeout, within a second of pings", seconds);
    ckpt_free(err);
  }
  ckpt_communicator_destroy(comm);
  ckpt_mpi_finalize();
  if (failures == 0 && rank == 0) printf("c_mpi_check: ok\n");
  return failures == 0 ? 0 : 1;
}
