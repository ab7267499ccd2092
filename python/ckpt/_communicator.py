"""ckpt.Communicator, the library's handle of a job's ranks, and the MPI
library (libckpt_mpi.so.1) that makes one over MPI_COMM_WORLD.
"""

import ctypes
import os
import threading

from ckpt._errors import Unavailable
from ckpt._lib import _LIB_DIR, _Owned, _call, _err, _lib, _make, _take_text


class Communicator(_Owned):
    """The ranks of a job; pass it to CheckpointManager(communicator=...)."""

    _free = "ckpt_communicator_destroy"

    @property
    def rank(self):
        return _lib.ckpt_communicator_rank(self._handle())

    @property
    def size(self):
        return _lib.ckpt_communicator_size(self._handle())

    @property
    def host_name(self):
        ptr = ctypes.c_void_p(
            _lib.ckpt_communicator_host_name(self._handle()))
        return _take_text(ptr) or ""

    def barrier(self):
        _call(_lib.ckpt_communicator_barrier, self._handle())


_MPI_LIBRARY = os.environ.get("CKPT_MPI_LIBRARY") or os.path.join(
    _LIB_DIR, "libckpt_mpi.so.1")
HAS_MPI = os.path.exists(_MPI_LIBRARY)
_mpi_lib = None
_mpi_lock = threading.Lock()


def _load_mpi():
    global _mpi_lib
    with _mpi_lock:
        if _mpi_lib is None:
            if not HAS_MPI:
                raise Unavailable(
                    "ckpt.mpi_communicator(): this ckpt was built without "
                    "MPI (install libopenmpi-dev and rebuild)")
            try:
                # Global: Open MPI's components, which it loads itself, look
                # for libmpi's symbols in the process.
                lib = ctypes.CDLL(_MPI_LIBRARY, mode=ctypes.RTLD_GLOBAL)
            except OSError as e:
                raise Unavailable(
                    f"ckpt.mpi_communicator(): cannot load {_MPI_LIBRARY}: "
                    f"{e} (is Open MPI installed? Debian: apt install "
                    f"openmpi-bin)") from None
            lib.ckpt_mpi_communicator_create.restype = ctypes.c_int
            lib.ckpt_mpi_communicator_create.argtypes = [_err, _err]
            lib.ckpt_mpi_communicator_create_with_timeout.restype = \
                ctypes.c_int
            lib.ckpt_mpi_communicator_create_with_timeout.argtypes = [
                ctypes.c_double, _err, _err]
            lib.ckpt_mpi_finalize.restype = None
            lib.ckpt_mpi_finalize.argtypes = []
            _mpi_lib = lib
    return _mpi_lib


def mpi_communicator(timeout=0):
    lib = _load_mpi()
    return Communicator(_make(lib.ckpt_mpi_communicator_create_with_timeout,
                              ctypes.c_double(timeout)))


def _finalize_mpi():
    if _mpi_lib is not None:
        _mpi_lib.ckpt_mpi_finalize()
