"""A communicator's timeout against a rank that never comes, for the jobs
mpi_job.py (under mpirun) and torchrun_job.py (under torchrun)."""

import time

import ckpt


def silent_rank(comm, timeout, fail):
    """Rank 1 stays away from a barrier for longer than `timeout`; every
    other rank's barrier must fail with ckpt.Unavailable after the timeout
    and within 5 s more (a second of pings, a loaded machine). Returns the
    error's text (None on rank 1); `fail(rank, why)` ends the job."""
    if comm.rank == 1:
        # Then a barrier of its own, which fails too (the others left
        # theirs), so that every rank reaches the job's end.
        time.sleep(2 * timeout + 1)
        try:
            comm.barrier()
        except ckpt.Error:
            pass
        return None
    start = time.monotonic()
    try:
        comm.barrier()
    except ckpt.Unavailable as e:
        took, why = time.monotonic() - start, str(e)
    else:
        fail(comm.rank, "the barrier without rank 1 succeeded")
    if not timeout <= took < timeout + 1 + 5:
        fail(comm.rank, f"it failed after {took:.2f} s, not within the "
             f"timeout ({timeout} s) and a second of pings: {why}")
    return why
