"""Communicators: the ranks of a many-rank job."""

import atexit

from ckpt import _communicator, _errors

_finalize_registered = False


def mpi_communicator():
    """The ranks of MPI_COMM_WORLD, for CheckpointManager(communicator=...).

    Run the program under mpirun (`mpirun -np 4 python3 job.py`; as root,
    Open MPI also wants `--allow-run-as-root`). MPI is initialized here (thread level
    MPI_THREAD_SERIALIZED) unless something else, such as mpi4py, already
    did; what this function initialized it finalizes at interpreter exit.
    ckpt calls MPI only inside save() and load() (and a save_async's
    thread), one call at a time. Raises ckpt.Unavailable where ckpt was
    built without MPI.
    """
    global _finalize_registered
    if not _communicator.HAS_MPI:
        raise _errors.Unavailable(
            "ckpt.mpi_communicator(): this ckpt was built without MPI "
            "(install libopenmpi-dev and rebuild)")
    comm = _communicator.mpi_communicator()
    if not _finalize_registered:
        atexit.register(_communicator._finalize_mpi)
        _finalize_registered = True
    return comm
