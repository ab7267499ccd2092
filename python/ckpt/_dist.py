"""Communicators: the ranks of a many-rank job."""

import atexit

from ckpt import _communicator, _errors

_finalize_registered = False


def mpi_communicator(timeout=None):
    """The ranks of MPI_COMM_WORLD, for CheckpointManager(communicator=...).

    Run the program under mpirun (`mpirun -np 4 python3 job.py`; as root,
    Open MPI also wants `--allow-run-as-root`). MPI is initialized here (thread level
    MPI_THREAD_SERIALIZED) unless something else, such as mpi4py, already
    did; what this function initialized it finalizes at interpreter exit.
    ckpt calls MPI only inside save() and load() (and a save_async's
    thread), one call at a time. Raises ckpt.Unavailable where ckpt was
    built without MPI.

    timeout: seconds each call between ranks (a collective inside save()
    or load(), or Communicator.barrier()) waits for the ranks it needs
    before it fails with ckpt.Unavailable, naming the ranks it heard
    nothing from, their hosts, and which of them answer no ping
    (unreachable or stopped). A node that stopped, or a network partition,
    then ends the call on every rank in about this time instead of never.
    Set it above the longest a rank may wait for the others' work (a save
    waits for the slowest rank's writes). None or 0: wait as long as it
    takes. With a timeout every rank must call mpi_communicator() (it
    gathers the ranks' host names), and after a timeout every later call
    fails at once with the same error: the job cannot go on, and since MPI
    finalization may then wait forever on a rank it cannot reach, end the
    process with os._exit(1) rather than a normal exit.
    """
    global _finalize_registered
    if timeout is None:
        timeout = 0
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not timeout >= 0 or timeout == float("inf"):
        raise _errors.InvalidArgument(
            f"ckpt.mpi_communicator(timeout={timeout!r}): the timeout is "
            f"a number of seconds >= 0 (None or 0: none)")
    if not _communicator.HAS_MPI:
        raise _errors.Unavailable(
            "ckpt.mpi_communicator(): this ckpt was built without MPI "
            "(install libopenmpi-dev and rebuild)")
    comm = _communicator.mpi_communicator(float(timeout))
    if not _finalize_registered:
        atexit.register(_communicator._finalize_mpi)
        _finalize_registered = True
    return comm
