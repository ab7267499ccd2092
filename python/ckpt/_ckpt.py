"""The binding to libckpt.so: ctypes over the C API (include/ckpt/c.h).

Every call into the library goes through this module: it loads the shared
library (ckpt/_lib/libckpt.so.1 beside the package, or $CKPT_LIBRARY),
declares each C function's signature, turns status codes into ckpt.Error
subclasses and the library's JSON records into Python objects. ctypes
releases the GIL for the length of every call, so other threads run while
the library reads and writes.

Entries reach this module as flat (name, kind, value, dtype[, placement])
tuples (see _manager.py and _values.py): a tensor's value is a NumPy array,
a _buffer.Buffer or a HostMemory (a CPU torch tensor's), whose memory the
library reads or fills in place.
"""

import array as _array
import contextlib
import ctypes
import gc
import itertools
import json
import os
import threading

from ckpt import _buffer, _device
from ckpt._records import (CatalogJob, CatalogCheckpoint, CheckpointDescription,
                           CheckpointInfo, SaveResult, TierRestoreResult,
                           TierSaveResult, row as _row)

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIB_DIR = os.path.join(_HERE, "_lib")
ABI_VERSION = 1


# ------------------------------------------------------------------ errors

class Error(Exception):
    """Base class of every error ckpt raises; the message names the object
    and the operation."""


class InvalidArgument(Error, ValueError):
    pass


class NotFound(Error):
    pass


class AlreadyExists(Error):
    pass


class DataLoss(Error):
    pass


class IOError(Error):  # noqa: A001 - the library's code name
    pass


class Unavailable(Error):
    pass


class Aborted(Error):
    pass


class FailedPrecondition(Error):
    pass


_CODES = [None, InvalidArgument, NotFound, AlreadyExists, DataLoss, IOError,
          Unavailable, Aborted, FailedPrecondition]
for _cls in _CODES[1:] + [Error]:
    _cls.__module__ = "ckpt"
del _cls


def _error(code, message):
    cls = _CODES[code] if 0 < code < len(_CODES) else Error
    return cls(message)


# ----------------------------------------------------------------- library

class _Entry(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("kind", ctypes.c_int),
        ("placement", ctypes.c_int),
        ("dtype", ctypes.c_char_p),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("data", ctypes.c_void_p),
        ("nbytes", ctypes.c_uint64),
        ("global_shape", ctypes.POINTER(ctypes.c_int64)),
        ("offsets", ctypes.POINTER(ctypes.c_int64)),
        ("owner", ctypes.c_int),
    ]


_KINDS = {"tensor": 0, "blob": 1, "metadata": 2}
_KIND_NAMES = {v: k for k, v in _KINDS.items()}
_PLACE_WHOLE, _PLACE_RANK_LOCAL, _PLACE_PIECE = 0, 1, 2

_p = ctypes.c_void_p
_i = ctypes.c_int
_i64 = ctypes.c_int64
_s = ctypes.c_char_p
_err = ctypes.POINTER(ctypes.c_void_p)  # char** errptr / out text
_SIGNATURES = {
    "ckpt_version": (_s, []),
    "ckpt_abi_version": (_i, []),
    "ckpt_code_name": (_s, [_i]),
    "ckpt_free": (None, [_p]),
    "ckpt_options_create": (_p, []),
    "ckpt_options_destroy": (None, [_p]),
    "ckpt_options_set": (_i, [_p, _s, _s, _err]),
    "ckpt_options_set_communicator": (None, [_p, _p]),
    "ckpt_options_set_catalog": (None, [_p, _p]),
    "ckpt_state_create": (_p, []),
    "ckpt_state_destroy": (None, [_p]),
    "ckpt_state_add": (_i, [_p, ctypes.POINTER(_Entry), ctypes.c_size_t, _i,
                            _err]),
    "ckpt_state_add_tensors": (_i, [
        _p, ctypes.c_size_t, _s, ctypes.c_size_t, _s, ctypes.c_size_t, _p,
        _p, ctypes.c_size_t, _p, _p, _i, _err]),
    "ckpt_state_set_error": (_i, [_p, _i, _s, _err]),
    "ckpt_state_set_location": (_i, [_p, ctypes.c_size_t, _i, _err]),
    "ckpt_state_set_cuda_stream": (_i, [_p, ctypes.c_uint64, _err]),
    "ckpt_state_size": (ctypes.c_size_t, [_p]),
    "ckpt_state_get": (_i, [_p, ctypes.c_size_t, ctypes.POINTER(_Entry),
                            _err]),
    "ckpt_communicator_destroy": (None, [_p]),
    "ckpt_communicator_rank": (_i, [_p]),
    "ckpt_communicator_size": (_i, [_p]),
    "ckpt_communicator_host_name": (_p, [_p]),
    "ckpt_communicator_barrier": (_i, [_p, _err]),
    "ckpt_catalog_open": (_i, [_s, _err, _err]),
    "ckpt_catalog_close": (None, [_p]),
    "ckpt_catalog_url": (_s, [_p]),
    "ckpt_catalog_jobs": (_i, [_p, _err, _err]),
    "ckpt_catalog_latest": (_i, [_p, _s, _err, _err]),
    "ckpt_catalog_best": (_i, [_p, _s, _s, _i, _err, _err]),
    "ckpt_catalog_list": (_i, [_p, _s, _s, _i, _i64, _err, _err]),
    "ckpt_manager_open": (_i, [_s, _p, _err, _err]),
    "ckpt_manager_close": (None, [_p]),
    "ckpt_manager_url": (_s, [_p]),
    "ckpt_manager_rank": (_i, [_p]),
    "ckpt_manager_world_size": (_i, [_p]),
    "ckpt_save_options_create": (_p, []),
    "ckpt_save_options_destroy": (None, [_p]),
    "ckpt_save_options_set_epoch": (None, [_p, _i64]),
    "ckpt_save_options_set_incremental": (None, [_p, _i]),
    "ckpt_save_options_set_stage_in_background": (None, [_p, _i]),
    "ckpt_save_options_set_metric": (_i, [_p, _s, ctypes.c_double, _err]),
    "ckpt_save_options_set_metadata": (_i, [_p, _s, _s, _err]),
    "ckpt_save_options_set_dirty_rows": (_i, [
        _p, _s, ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t, _err]),
    "ckpt_manager_save": (_i, [_p, _i64, _p, _p, _err, _err]),
    "ckpt_manager_save_async": (_p, [_p, _i64, _p, _p]),
    "ckpt_save_step": (_i64, [_p]),
    "ckpt_save_done": (_i, [_p]),
    "ckpt_save_wait": (_i, [_p, _err, _err]),
    "ckpt_save_wait_staged": (_i, [_p, _err]),
    "ckpt_save_destroy": (None, [_p]),
    "ckpt_manager_load": (_i, [_p, _i64, _p, _i, _err, _err]),
    "ckpt_manager_load_ex": (_i, [_p, _i64, _p, _i, _i, _err, _err]),
    "ckpt_manager_load_rank_local": (_i, [_p, _i64, _s,
                                          ctypes.POINTER(ctypes.c_void_p),
                                          _err, _err]),
    "ckpt_manager_latest": (_i, [_p, ctypes.POINTER(ctypes.c_int64), _err]),
    "ckpt_manager_list": (_i, [_p, _err, _err]),
    "ckpt_manager_describe": (_i, [_p, _i64, _err, _err]),
    "ckpt_manager_describe_columns": (_i, [_p, _i64, _err, _err]),
    "ckpt_manager_verify": (_i, [_p, _i64, _err, _err]),
    "ckpt_manager_delete": (_i, [_p, _i64, _i, _err]),
    "ckpt_manager_gc": (_i, [_p, _i, _err, _err]),
    "ckpt_communicator_set_send_recv": (_i, [_p, _p, _err]),
    "ckpt_tiered_open": (_i, [_p, _s, _i64, _i64, _i, _i, ctypes.c_double,
                              ctypes.POINTER(ctypes.c_int), ctypes.c_size_t,
                              _err, _err]),
    "ckpt_tiered_close": (None, [_p]),
    "ckpt_tiered_node": (_i, [_p]),
    "ckpt_tiered_save": (_i, [_p, _i64, _p, _p, _i, _err, _err]),
    "ckpt_tiered_save_async": (_p, [_p, _i64, _p, _p, _i]),
    "ckpt_tier_save_done": (_i, [_p]),
    "ckpt_tier_save_wait": (_i, [_p, _err, _err]),
    "ckpt_tier_save_destroy": (None, [_p]),
    "ckpt_tiered_restore": (_i, [_p, _p, _i, _err, _err]),
    "ckpt_local_tier_list": (_i, [_s, _err, _err]),
}


def library_path():
    """The libckpt.so this package loads."""
    return os.environ.get("CKPT_LIBRARY") or os.path.join(_LIB_DIR,
                                                          "libckpt.so.1")


def _load_library():
    path = library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            f"ckpt: cannot load its library {path}: {e} (reinstall the "
            f"ckpt wheel, or set CKPT_LIBRARY to a libckpt.so.1)") from None
    for name, (restype, argtypes) in _SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            # An older libckpt.so.1 (CKPT_LIBRARY pointing past the wheel's
            # own): same ABI, but without a function added since.
            raise ImportError(
                f"ckpt: its library {path} lacks {name} (an older build); "
                f"reinstall the ckpt wheel, or point CKPT_LIBRARY at the "
                f"libckpt.so.1 built with this package") from None
        fn.restype = restype
        fn.argtypes = argtypes
    if lib.ckpt_abi_version() != ABI_VERSION:
        raise ImportError(
            f"ckpt: {path} has ABI version {lib.ckpt_abi_version()}; this "
            f"package needs {ABI_VERSION}")
    return lib


_lib = _load_library()
__version__ = _lib.ckpt_version().decode()


def _take_text(ptr):
    """The text of a buffer the library returned, freed."""
    if not ptr.value:
        return None
    try:
        return ctypes.string_at(ptr.value).decode("utf-8", "replace")
    finally:
        _lib.ckpt_free(ptr.value)


def _streamed(load, *args):
    """A streaming load (transactional=0) of the library's, into memory the
    package hands over only once the load succeeded, or whose partial
    writes the package names itself (_manager._partly_written): the
    library's list of the entries it changed is left out of the error."""
    try:
        return _call(load, *args, 0, out=True)
    except Error as e:
        message = str(e)
        cut = message.find("; entries changed before the failure: ")
        if cut < 0:
            raise
        raise type(e)(message[:cut]) from None


def _call(fn, *args, out=False):
    """Calls a status-returning function whose last parameter is errptr
    (and, with out=True, the one before it a text it returns)."""
    err = ctypes.c_void_p()
    text = ctypes.c_void_p()
    code = fn(*args, ctypes.byref(text), ctypes.byref(err)) if out else \
        fn(*args, ctypes.byref(err))
    if code != 0:
        message = _take_text(err) or f"{_lib.ckpt_code_name(code).decode()}"
        _take_text(text)
        raise _error(code, message)
    result = _take_text(text)
    return json.loads(result) if out and result is not None else result


def _make(fn, *args):
    """Calls a function that makes a handle: (..., out, errptr)."""
    out = ctypes.c_void_p()
    _call(fn, *args, ctypes.byref(out))
    return out.value


def _encode(text, what):
    """UTF-8 bytes of `text` for a C string: no lone surrogates (they have
    no UTF-8) and no NUL (it would end the string early)."""
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, not {type(text).__name__}")
    if "\0" in text:
        raise InvalidArgument(f"{what} {text!r} contains a NUL character")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgument(f"{what} {text!r} is not valid Unicode text "
                              f"({e.reason})") from None


def _raise_status(code, message):
    """Raises the error of the library's code named `code` (for tests)."""
    for c in range(1, len(_CODES)):
        if _lib.ckpt_code_name(c).decode() == code:
            raise _error(c, message)
    raise InvalidArgument(f"unknown error code {code}")


@contextlib.contextmanager
def gc_paused():
    """Pauses Python's cycle collector while a save or load makes objects
    by the thousand (tuples, arrays, tensors; no cycles among them): each
    run of the collector walks every tracked object, and 10,000 tensors
    set it off often enough to cost a fifth of such a save. Re-enabled
    after, unless it was off before; a thread that pauses it meanwhile
    sees it off and leaves it to the first."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# --------------------------------------------------------- handles, owned

class _Owned:
    """A library handle, freed exactly once (close() or collection)."""

    _free = None

    def __init__(self, handle):
        self._h = handle

    def close(self):
        h, self._h = self._h, None
        if h:
            getattr(_lib, self._free)(h)

    def __del__(self):
        # At interpreter exit the module's globals may be gone already.
        if _lib is not None:
            self.close()

    def _handle(self):
        if not self._h:
            raise FailedPrecondition(f"this {type(self).__name__} is closed")
        return self._h


# ---------------------------------------------------------------- catalog

class Catalog(_Owned):
    """The catalog of committed checkpoints: a SQLite file (sqlite:///path
    or a plain path) or a postgresql:// URL; "" or "default":
    $CKPT_CATALOG, else ~/.local/state/ckpt/catalog.sqlite. Pass it to
    CheckpointManager(catalog=...) to record saves, or ask it what to
    resume from."""

    _free = "ckpt_catalog_close"

    def __init__(self, url=""):
        super().__init__(None)
        url = os.fspath(url)
        self._h = _make(_lib.ckpt_catalog_open, _encode(url, "catalog URL"))

    @property
    def url(self):
        return _lib.ckpt_catalog_url(self._handle()).decode()

    def jobs(self):
        """Every job, by id (CatalogJob)."""
        rows = _call(_lib.ckpt_catalog_jobs, self._handle(), out=True)
        return [CatalogJob(r) for r in rows]

    def latest(self, job):
        """The job's newest committed durable checkpoint
        (CatalogCheckpoint), or None."""
        return _row(_call(_lib.ckpt_catalog_latest, self._handle(),
                          _encode(job, "job"), out=True))

    def best(self, job, metric, higher_is_better=False):
        """The job's committed durable checkpoint with the lowest (or, with
        higher_is_better, highest) value of `metric`, or None."""
        return _row(_call(_lib.ckpt_catalog_best, self._handle(),
                          _encode(job, "job"), _encode(metric, "metric"),
                          1 if higher_is_better else 0, out=True))

    def list(self, job="", *, root="", include_deleted=False, limit=0,
             tier=None):
        """Rows (CatalogCheckpoint), oldest step first: of one job and/or
        root ("": every one), committed only unless include_deleted, at
        most `limit` newest (0: all); of one tier ("durable" or "local")
        or both (None)."""
        if tier not in (None, "durable", "local"):
            raise InvalidArgument(f"no tier {tier!r}: a tier is 'durable' or "
                                  "'local'")
        rows = _call(_lib.ckpt_catalog_list, self._handle(),
                     _encode(job, "job"), _encode(os.fspath(root), "root"),
                     1 if include_deleted else 0,
                     int(limit) if tier is None else 0, out=True)
        rows = [CatalogCheckpoint(r) for r in rows
                if tier is None or r.get("tier", "durable") == tier]
        return rows[-int(limit):] if tier is not None and limit else rows


# ---------------------------------------------------------- communicators

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
            lib.ckpt_mpi_finalize.restype = None
            lib.ckpt_mpi_finalize.argtypes = []
            _mpi_lib = lib
    return _mpi_lib


def mpi_communicator():
    lib = _load_mpi()
    return Communicator(_make(lib.ckpt_mpi_communicator_create))


def _finalize_mpi():
    if _mpi_lib is not None:
        _mpi_lib.ckpt_mpi_finalize()


# ------------------------------------------------------------------ states

try:
    import numpy as _np
except ImportError:  # NumPy is optional: buffers serve without it
    _np = None

# NumPy's kind and width -> safetensors dtype.
_NUMPY_DTYPES = {("b", 1): "BOOL", ("u", 1): "U8", ("i", 1): "I8",
                 ("u", 2): "U16", ("i", 2): "I16", ("f", 2): "F16",
                 ("u", 4): "U32", ("i", 4): "I32", ("f", 4): "F32",
                 ("u", 8): "U64", ("i", 8): "I64", ("f", 8): "F64"}
# safetensors dtype -> the NumPy dtype a loaded tensor gets (raw bits for
# the dtypes NumPy lacks).
_NUMPY_NAMES = {"BOOL": "bool", "U8": "uint8", "F8_E4M3": "uint8",
                "F8_E5M2": "uint8", "I8": "int8", "U16": "uint16",
                "BF16": "uint16", "I16": "int16", "F16": "float16",
                "U32": "uint32", "I32": "int32", "F32": "float32",
                "U64": "uint64", "I64": "int64", "F64": "float64"}
# The same as NumPy dtype objects, so that no load parses a dtype's name
# once per tensor.
_NUMPY_TYPES = ({k: _np.dtype(v) for k, v in _NUMPY_NAMES.items()}
                if _np is not None else {})
_WIDTHS = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
           "U16": 2, "I16": 2, "F16": 2, "BF16": 2, "U32": 4, "I32": 4,
           "F32": 4, "U64": 8, "I64": 8, "F64": 8}


def _bad_entry(name, why):
    return InvalidArgument(f'entry "{name}": {why}')


def _int64s(values):
    return (ctypes.c_int64 * len(values))(*values)


def _address(array):
    """The address of a NumPy array's first byte: through ctypes, a third
    of the time __array_interface__ takes (which builds a dict), except
    for an empty array, which ctypes cannot take a buffer of."""
    if array.nbytes:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    return array.__array_interface__["data"][0]


def _tensor_memory(name, value, dtype, for_load):
    """(address, nbytes, dtype name, shape, keep-alive) of a tensor value:
    a NumPy array or a _buffer.Buffer."""
    if _np is not None and isinstance(value, _np.ndarray):
        if not value.flags.c_contiguous:
            raise _bad_entry(name, "the array is not C-contiguous")
        if value.dtype.byteorder == ">":
            raise _bad_entry(name, "the array is big-endian; safetensors "
                                   "data is little-endian")
        own = _NUMPY_DTYPES.get((value.dtype.kind, value.dtype.itemsize))
        if own is None:
            raise _bad_entry(name, f"NumPy dtype {value.dtype} has no "
                                   f"safetensors dtype")
        if for_load and not value.flags.writeable:
            raise _bad_entry(name, "the array is read-only")
        address = value.__array_interface__["data"][0]
        nbytes, shape, width = value.nbytes, value.shape, value.itemsize
    elif isinstance(value, (_buffer.Buffer, HostMemory)):
        own, address, nbytes, shape = (value.dtype, value.address,
                                       value.nbytes, value.shape)
        width = _WIDTHS[own]
    elif isinstance(value, _device.DeviceArray):
        own, address, nbytes, shape = (value.dtype, value.address,
                                       value.nbytes, value.shape)
        width = _WIDTHS[own]
    else:
        raise _bad_entry(name, "a tensor must be a NumPy array, a buffer or "
                               "a CUDA array")
    if dtype is not None:
        if dtype not in _WIDTHS:
            raise _bad_entry(name, f"unknown dtype {dtype}")
        if _WIDTHS[dtype] != width:
            raise _bad_entry(name, f"dtype {dtype} is not as wide as the "
                                   f"array's elements")
        own = dtype
    return address, nbytes, own, list(shape), value


class HostMemory:
    """A tensor's bytes in host memory by address, dtype name and shape:
    what a CPU torch tensor becomes (_values.encode), with no NumPy view
    made of it. `owner`, the tensor, keeps the memory alive."""

    __slots__ = ("address", "nbytes", "dtype", "shape", "owner")

    def __init__(self, address, nbytes, dtype, shape, owner):
        self.address, self.nbytes, self.dtype = address, nbytes, dtype
        self.shape, self.owner = shape, owner


def _plain_tensor(item):
    """Whether an entry is a whole tensor in host memory (what
    ckpt_state_add_tensors takes)."""
    return (item[1] == "tensor" and (len(item) < 5 or item[4] is None)
            and not isinstance(item[2], _device.DeviceArray))


def _packed_names(names):
    """The UTF-8 of `names`, each ended by a NUL, back to back; the first
    name that cannot be a C string raises _encode's error."""
    text = "\0".join(names) if all(type(n) is str for n in names) else None
    if text is not None and text.count("\0") == len(names) - 1:
        try:
            return (text + "\0").encode("utf-8")
        except UnicodeEncodeError:
            pass
    return b"".join(_encode(n, "entry name") + b"\0" for n in names)


class _State(_Owned):
    """A library state over Python values: the entries' memory is kept
    alive (and, for buffers, held open) as long as this object."""

    _free = "ckpt_state_destroy"

    def __init__(self, entries=(), for_load=False, handle=None):
        super().__init__(handle or _lib.ckpt_state_create())
        if not self._h:
            raise MemoryError("ckpt: cannot create a state")
        self._keep = []
        if entries:
            self._add(entries, for_load)

    def _add(self, entries, for_load):
        # Every entry is checked here before the library sees any, so that
        # the first bad one (in order) raises, as in one ckpt_state_add
        # call; the library's own checks follow, in order too. Whole host
        # tensors in a row go in through ckpt_state_add_tensors: filling
        # a ctypes struct field by field costs microseconds a tensor, which
        # for 10,000 small ones is most of a save.
        calls = []
        for plain, group in itertools.groupby(entries, _plain_tensor):
            group = list(group)
            calls.append(self._tensors(group, for_load) if plain else
                         self._entries(group, for_load))
        for call in calls:
            call()
        n = len(entries)
        # Entries in CUDA memory: where they live, and the stream their
        # bytes are ordered on (the first device tensor's: PyTorch's current
        # stream), which the library's copies wait for.
        start = len(self) - n
        stream = None
        for i, item in enumerate(entries):
            value = item[2]
            if isinstance(value, _device.DeviceArray):
                _call(_lib.ckpt_state_set_location, self._h, start + i,
                      value.device)
                if stream is None and value.stream:
                    stream = value.stream
        if stream is not None:
            _call(_lib.ckpt_state_set_cuda_stream, self._h, stream)

    def _tensors(self, items, for_load):
        """The ckpt_state_add_tensors call that adds `items`, whole host
        tensors, once their checks have passed."""
        dtypes, ndims, shapes, addresses, sizes = [], [], [], [], []
        for i, (name, _, value, dtype, *_) in enumerate(items):
            try:
                if type(value) is HostMemory and dtype is None:
                    own, address, nbytes, shape = (value.dtype, value.address,
                                                   value.nbytes, value.shape)
                else:
                    address, nbytes, own, shape, _ = _tensor_memory(
                        name, value, dtype, for_load)
            except Exception:
                # A bad name before or at this entry was its error first.
                for item in items[:i + 1]:
                    _encode(item[0], "entry name")
                raise
            dtypes.append(own)
            ndims.append(len(shape))
            shapes.extend(shape)
            addresses.append(address)
            sizes.append(nbytes)
        names = _packed_names([item[0] for item in items])
        kinds = ("\0".join(dtypes) + "\0").encode()
        arrays = (_array.array("i", ndims), _array.array("q", shapes),
                  _array.array("Q", addresses), _array.array("Q", sizes))
        ndims, shapes, addresses, sizes = (a.buffer_info()[0] if len(a) else
                                           None for a in arrays)
        self._keep.extend(item[2] for item in items)

        def call():
            _call(_lib.ckpt_state_add_tensors, self._h, len(items), names,
                  len(names), kinds, len(kinds), ndims, shapes,
                  len(arrays[1]), addresses, sizes, 1 if for_load else 0)
        return call

    def _add_targets(self, desc, run):
        """Adds fresh NumPy arrays as load targets of whole tensors in one
        ckpt_state_add_tensors call: `run` holds (index into the columns
        of `desc`, shape, array). Arrays this module just made need none
        of _tensor_memory's checks; the library checks names, dtypes and
        shapes as ever."""
        names, dtypes = desc["names"], desc["dtypes"]
        ndims, shapes, addresses, sizes = [], [], [], []
        for _, shape, array in run:
            ndims.append(len(shape))
            shapes.extend(shape)
            addresses.append(_address(array))
            sizes.append(array.nbytes)
        packed = _packed_names([names[i] for i, _, _ in run])
        kinds = ("\0".join([dtypes[i] for i, _, _ in run]) + "\0").encode()
        arrays = (_array.array("i", ndims), _array.array("q", shapes),
                  _array.array("Q", addresses), _array.array("Q", sizes))
        self._keep.extend(array for _, _, array in run)
        self._keep.append(arrays)
        pointers = [a.buffer_info()[0] if len(a) else None for a in arrays]
        _call(_lib.ckpt_state_add_tensors, self._h, len(run), packed,
              len(packed), kinds, len(kinds), pointers[0], pointers[1],
              len(arrays[1]), pointers[2], pointers[3], 1)

    def _entries(self, entries, for_load):
        """The ckpt_state_add call that adds `entries`, once their checks
        have passed."""
        n = len(entries)
        array = (_Entry * n)()
        keep = self._keep
        for i, item in enumerate(entries):
            name, kind, value, dtype = item[:4]
            place = item[4] if len(item) > 4 else None
            e = array[i]
            encoded = _encode(name, "entry name")
            keep.append(encoded)
            e.name = encoded
            if kind not in _KINDS:
                raise _bad_entry(name, f"unknown entry kind {kind}")
            e.kind = _KINDS[kind]
            e.placement = _PLACE_WHOLE
            if place is not None:
                if place[0] == "local" and len(place) == 1:
                    e.placement = _PLACE_RANK_LOCAL
                elif place[0] == "piece" and len(place) == 3:
                    e.placement = _PLACE_PIECE
                else:
                    raise _bad_entry(name, f"unknown placement {place!r}")
            if kind == "tensor":
                address, nbytes, own, shape, owner = _tensor_memory(
                    name, value, dtype, for_load)
                keep.append(owner)
                e.dtype = own.encode()
                e.ndim = len(shape)
                dims = _int64s(shape)
                keep.append(dims)
                e.shape = dims
                e.data = address
                e.nbytes = nbytes
                if e.placement == _PLACE_PIECE:
                    _, global_shape, offsets = place
                    if len(global_shape) != len(shape) or len(offsets) != len(
                            shape):
                        raise _bad_entry(
                            name, "a piece needs one offset and one global "
                                  "dimension per dimension of its box")
                    g, o = _int64s(global_shape), _int64s(offsets)
                    keep.extend((g, o))
                    e.global_shape, e.offsets = g, o
            elif kind == "blob":
                if e.placement == _PLACE_PIECE:
                    raise _bad_entry(name, "only a tensor can be a shard")
                if not for_load:
                    if not isinstance(value, bytes):
                        raise _bad_entry(name, "a blob must be bytes")
                    # A c_char_p made from bytes points at the bytes' own
                    # buffer: no copy.
                    ptr = ctypes.c_char_p(value)
                    keep.append((value, ptr))
                    e.data = ctypes.cast(ptr, ctypes.c_void_p)
                    e.nbytes = len(value)
            else:
                if e.placement != _PLACE_WHOLE:
                    raise _bad_entry(name, "only a tensor or bytes can be a "
                                           "shard or rank-local")
                if not for_load:
                    text = _encode(value, f'entry "{name}": metadata')
                    keep.append(text)
                    e.data = ctypes.cast(ctypes.c_char_p(text),
                                         ctypes.c_void_p)
                    e.nbytes = len(text)
        return lambda: _call(_lib.ckpt_state_add, self._h, array, n,
                             1 if for_load else 0)

    def __len__(self):
        return _lib.ckpt_state_size(self._handle())

    def get(self, i):
        e = _Entry()
        _call(_lib.ckpt_state_get, self._handle(), i, ctypes.byref(e))
        return e

    def bytes_of(self, i):
        """The bytes of a blob entry, or the text of a metadata entry."""
        e = self.get(i)
        data = ctypes.string_at(e.data, e.nbytes) if e.nbytes else b""
        return data.decode() if e.kind == _KINDS["metadata"] else data


def new_tensor(dtype, shape):
    """A fresh tensor to load into: a NumPy array when NumPy is there,
    else a memoryview (_buffer.new_tensor)."""
    if _np is not None:
        return _np.empty(shape, _NUMPY_TYPES[dtype])
    view, _ = _buffer.new_tensor(dtype, shape)
    return view


def _target(array, dtype, shape):
    """A fresh tensor as the value of a load entry: NumPy, or a Buffer
    whose shape is the stored one (a memoryview cannot hold a zero)."""
    if _np is not None and isinstance(array, _np.ndarray):
        return array
    b = _buffer.Buffer(array, dtype, True)
    b.shape = list(shape)
    return b


# ---------------------------------------------------------------- manager

def _option_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _step(step):
    if step is None:
        return -1
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"a step must be an int, not {type(step).__name__}")
    if step < 0:
        raise InvalidArgument(f"step {step} is negative")
    return step


class AsyncSave(_Owned):
    """A save running in the background (see
    CheckpointManager.save_async)."""

    _free = "ckpt_save_destroy"

    def __init__(self, handle, manager, state=None):
        super().__init__(handle)
        self._manager = manager  # the manager outlives its saves' handles
        # Staged in the background: the state (and the arrays it borrows)
        # must live until the copy is done.
        self._state = state

    def wait_staged(self):
        """Blocks until the state has been copied into the library's
        staging memory, after which the arrays may change (at once, unless
        the save was started with stage_in_background=True); raises the
        copy's error, which wait() raises too."""
        try:
            _call(_lib.ckpt_save_wait_staged, self._handle())
        finally:
            self._state = None

    def wait(self):
        """Blocks until the save has committed and returns its SaveResult,
        or raises its error (every call gives the same outcome)."""
        try:
            return SaveResult(_call(_lib.ckpt_save_wait, self._handle(),
                                    out=True))
        finally:
            self._state = None

    def done(self):
        """True once wait() would not block."""
        return bool(_lib.ckpt_save_done(self._handle()))

    @property
    def step(self):
        return _lib.ckpt_save_step(self._handle())


class _SaveOptions(_Owned):
    _free = "ckpt_save_options_destroy"

    def __init__(self, epoch, metrics, metadata, incremental, dirty_rows):
        super().__init__(_lib.ckpt_save_options_create())
        h = self._h
        _lib.ckpt_save_options_set_epoch(h, int(epoch))
        _lib.ckpt_save_options_set_incremental(h, 1 if incremental else 0)
        for name, value in metrics.items():
            _call(_lib.ckpt_save_options_set_metric, h,
                  _encode(name, "metric name"), float(value))
        for key, value in metadata.items():
            _call(_lib.ckpt_save_options_set_metadata, h,
                  _encode(key, "metadata key"),
                  _encode(value, "metadata value"))
        for name, ranges in dirty_rows.items():
            flat = [int(x) for pair in ranges for x in pair]
            _call(_lib.ckpt_save_options_set_dirty_rows, h,
                  _encode(name, "dirty_rows name"), _int64s(flat),
                  len(flat) // 2)


def _set_options(opts, catalog, catalog_required, communicator, options):
    for name, value in options.items():
        _call(_lib.ckpt_options_set, opts, name.encode(),
              _encode(_option_text(value), f"option {name}"))
    if isinstance(catalog, Catalog):
        _lib.ckpt_options_set_catalog(opts, catalog._handle())
    elif catalog is not None:
        _call(_lib.ckpt_options_set, opts, b"catalog",
              _encode(catalog, "catalog URL"))
        _call(_lib.ckpt_options_set, opts, b"catalog_required",
              _option_text(bool(catalog_required)).encode())
    if communicator is not None:
        if not isinstance(communicator, Communicator):
            raise TypeError("communicator must be a ckpt.Communicator")
        _lib.ckpt_options_set_communicator(opts, communicator._handle())


class Manager(_Owned):
    """ckpt_manager_t: what CheckpointManager (_manager.py) drives."""

    _free = "ckpt_manager_close"

    def __init__(self, url, *, catalog=None, catalog_required=False,
                 communicator=None, **options):
        super().__init__(None)
        opts = _lib.ckpt_options_create()
        try:
            _set_options(opts, catalog, catalog_required, communicator,
                         options)
            self._h = _make(_lib.ckpt_manager_open,
                            _encode(url, "root URL"), opts)
        finally:
            _lib.ckpt_options_destroy(opts)

    @staticmethod
    def check_options(*, catalog=None, catalog_required=False,
                      communicator=None, **options):
        """Raises what Manager() would of each option's value, opening
        nothing."""
        opts = _lib.ckpt_options_create()
        try:
            _set_options(opts, catalog, catalog_required, communicator,
                         options)
        finally:
            _lib.ckpt_options_destroy(opts)

    @property
    def url(self):
        return _lib.ckpt_manager_url(self._handle()).decode()

    @property
    def rank(self):
        return _lib.ckpt_manager_rank(self._handle())

    @property
    def world_size(self):
        return _lib.ckpt_manager_world_size(self._handle())

    def save(self, step, entries, epoch, metrics, metadata, incremental,
             dirty_rows):
        with gc_paused():
            state = self._state_to_save(entries)
        options = _SaveOptions(epoch, metrics, metadata, incremental,
                               dirty_rows)
        return SaveResult(_call(_lib.ckpt_manager_save, self._handle(),
                                _step(step), state._h, options._h, out=True))

    def save_async(self, step, entries, epoch, metrics, metadata, incremental,
                   dirty_rows, stage_in_background=False):
        # The library has copied the state by the time it returns, and the
        # arrays are the caller's again, unless the copy runs in the
        # background: then the handle keeps `state` until it is done.
        with gc_paused():
            state = self._state_to_save(entries)
        options = _SaveOptions(epoch, metrics, metadata, incremental,
                               dirty_rows)
        _lib.ckpt_save_options_set_stage_in_background(
            options._h, 1 if stage_in_background else 0)
        h = _lib.ckpt_manager_save_async(self._handle(), _step(step),
                                         state._h, options._h)
        if not h:
            raise MemoryError("ckpt: cannot start an asynchronous save")
        return AsyncSave(h, self, state if stage_in_background else None)

    def _state_to_save(self, entries):
        """The state of `entries`, or, when they are an exception (what
        the caller found wrong before the library saw them) or the library
        refuses one, a state failed with that error. With many ranks the
        save then still takes part in the collectives, so that every rank
        fails with this rank's error instead of waiting for it; alone, the
        error is raised at once."""
        error = entries if isinstance(entries, BaseException) else None
        if error is None:
            try:
                return _State(entries)
            except Exception as e:  # noqa: BLE001 - reported to every rank
                error = e
        if self.world_size == 1:
            raise error
        code = next((c for c in range(1, len(_CODES))
                     if isinstance(error, _CODES[c])), _CODES.index(Aborted))
        message = str(error) if isinstance(error, Error) else \
            f"{type(error).__name__}: {error}"
        state = _State()
        _call(_lib.ckpt_state_set_error, state._h, code,
              message.encode("utf-8", "replace").replace(b"\0", b" "))
        return state

    def describe(self, step):
        return CheckpointDescription(_call(
            _lib.ckpt_manager_describe, self._handle(), _step(step),
            out=True))

    def load(self, step, new_device_tensor=None):
        """(info, [(name, kind, dtype, value)], {names left out}).
        new_device_tensor(name, dtype, shape), when given, makes each tensor
        to load into (a _device.DeviceArray), in place of host arrays."""
        with gc_paused():
            step, kept, omitted, arrays, state = self._load_targets(
                step, new_device_tensor)
        # The arrays are new: the library need not stage them first.
        info = CheckpointInfo(_streamed(_lib.ckpt_manager_load_ex,
                                        self._handle(), step, state._h, 0))
        with gc_paused():
            out = []
            for i, (name, kind, dtype) in enumerate(kept):
                value = arrays[i] if kind == "tensor" else state.bytes_of(i)
                out.append((name, kind, dtype, value))
        return info, out, omitted

    def _load_targets(self, step, new_device_tensor):
        """(step, [(name, kind, dtype)] kept, {names left out}, arrays,
        state) of a load: the entries to ask for and where they go."""
        # The description as columns, not an object per entry, and no
        # EntryInfo either: for 10,000 entries either would cost more than
        # the load of their bytes.
        desc = _call(_lib.ckpt_manager_describe_columns, self._handle(),
                     _step(step), out=True)
        same_world = desc["info"]["world_size"] == self.world_size
        rank = self.rank
        # Whole tensors of the job into fresh NumPy arrays, the common case,
        # go to the library in runs, straight from the columns (names,
        # dtypes, shapes) with only each array's address added; the rest
        # (blobs, metadata, rank-local values, device targets, no NumPy)
        # through _State's checks.
        fast = new_device_tensor is None and _np is not None
        state = _State()
        kept, omitted, entries, arrays = [], set(), [], []
        run = []  # (column index, shape, array) of the current run of them
        shapes, dim = desc["shapes"], 0

        def flush():
            if entries:
                state._add(entries, True)
                entries.clear()
            if run:
                state._add_targets(desc, run)
                run.clear()

        for i, (name, owner, kind, dtype, ndim) in enumerate(zip(
                desc["names"], desc["owners"], desc["kinds"], desc["dtypes"],
                desc["ndims"])):
            shape = shapes[dim:dim + ndim]
            dim += ndim
            if not (owner < 0 or (same_world and owner == rank)):
                omitted.add(name)
                continue
            kept.append((name, kind, dtype))
            if fast and kind == "tensor" and owner < 0:
                if entries:
                    flush()
                array = _np.empty(shape, _NUMPY_TYPES[dtype])
                arrays.append(array)
                run.append((i, shape, array))
                continue
            if run:
                flush()
            place = None if owner < 0 else ("local",)
            if kind == "tensor" and new_device_tensor is not None:
                array = new_device_tensor(name, dtype, shape)
                arrays.append(array.owner)
                entries.append((name, "tensor", array, dtype, place))
            elif kind == "tensor":
                array = new_tensor(dtype, shape)
                arrays.append(array)
                entries.append((name, "tensor", _target(array, dtype, shape),
                                dtype, place))
            else:
                arrays.append(None)
                entries.append((name, kind, None, None, place))
        flush()
        return desc["info"]["step"], kept, omitted, arrays, state

    def load_into(self, step, entries, strict):
        """Fills the arrays of `entries` in place; (info, [(name, kind,
        value)]) for its blobs and metadata."""
        state = _State(entries, for_load=True)
        # Streaming: the package makes a load all-or-nothing itself (it
        # reads into new memory, _manager.py), so staging it in the library
        # as well would hold a third copy.
        info = CheckpointInfo(_streamed(_lib.ckpt_manager_load_ex,
                                        self._handle(), _step(step), state._h,
                                        1 if strict else 0))
        out = []
        for i, item in enumerate(entries):
            if item[1] != "tensor":
                out.append((item[0], item[1], state.bytes_of(i)))
        return info, out

    def load_rank_local(self, step, name):
        """(info, [(rank, kind, dtype, value)])."""
        h = ctypes.c_void_p()
        info = CheckpointInfo(_call(
            _lib.ckpt_manager_load_rank_local, self._handle(), _step(step),
            _encode(name, "entry name"), ctypes.byref(h), out=True))
        state = _State(handle=h.value)
        out = []
        for i in range(len(state)):
            e = state.get(i)
            rank = int(e.name.decode())
            if e.kind == _KINDS["tensor"]:
                dtype = e.dtype.decode()
                shape = [e.shape[d] for d in range(e.ndim)]
                array = new_tensor(dtype, shape)
                if e.nbytes:
                    dst = (array.__array_interface__["data"][0]
                           if _np is not None else
                           ctypes.addressof(ctypes.c_char.from_buffer(array)))
                    ctypes.memmove(dst, e.data, e.nbytes)
                out.append((rank, "tensor", dtype, array))
            else:
                out.append((rank, _KIND_NAMES[e.kind], "U8",
                            state.bytes_of(i)))
        return info, out

    def latest(self):
        step = ctypes.c_int64()
        _call(_lib.ckpt_manager_latest, self._handle(), ctypes.byref(step))
        return None if step.value < 0 else step.value

    def list(self):
        return [CheckpointInfo(i) for i in _call(
            _lib.ckpt_manager_list, self._handle(), out=True)]

    def delete(self, step, rewrite_dependants=False):
        _call(_lib.ckpt_manager_delete, self._handle(), _step(step),
              1 if rewrite_dependants else 0)

    def verify(self, step):
        return _call(_lib.ckpt_manager_verify, self._handle(), _step(step),
                     out=True)

    def gc(self, dry_run=False):
        return _call(_lib.ckpt_manager_gc, self._handle(),
                     1 if dry_run else 0, out=True)


# ------------------------------------------------------------------ tiers

_TIER_BY_INTERVAL, _TIER_DURABLE, _TIER_SKIP_DURABLE = 0, 1, 2


class TierAsyncSave(_Owned):
    """A tiered save running in the background (Tiers.save_async)."""

    _free = "ckpt_tier_save_destroy"

    def __init__(self, handle, tiers):
        super().__init__(handle)
        self._tiers = tiers  # the tiers outlive their saves' handles

    def wait(self):
        """Blocks until the save is done and returns its TierSaveResult,
        or raises its error (every call gives the same outcome)."""
        return TierSaveResult(_call(_lib.ckpt_tier_save_wait,
                                    self._handle(), out=True))

    def done(self):
        """True once wait() would not block."""
        return bool(_lib.ckpt_tier_save_done(self._handle()))


class Tiered(_Owned):
    """ckpt_tiered_t: what Tiers (_manager.py) drives."""

    _free = "ckpt_tiered_close"

    def __init__(self, manager, local_url, local_every, durable_every, keep,
                 replicas, replication_rate, nodes):
        super().__init__(None)
        self._manager = manager  # the durable manager outlives the tiers
        nodes = [] if nodes is None else [int(n) for n in nodes]
        array = (ctypes.c_int * max(len(nodes), 1))(*nodes)
        self._h = _make(_lib.ckpt_tiered_open, manager._handle(),
                        _encode(local_url, "local tier URL"),
                        int(local_every), int(durable_every), int(keep),
                        -1 if replicas is None else int(replicas),
                        float(replication_rate or 0),
                        array if nodes else None, len(nodes))

    @property
    def node(self):
        return _lib.ckpt_tiered_node(self._handle())

    def save(self, step, entries, epoch, metrics, metadata, durable):
        with gc_paused():
            state = self._manager._state_to_save(entries)
        options = _SaveOptions(epoch, metrics, metadata, False, {})
        return TierSaveResult(_call(_lib.ckpt_tiered_save, self._handle(),
                                    _step(step), state._h, options._h,
                                    durable, out=True))

    def save_async(self, step, entries, epoch, metrics, metadata, durable):
        with gc_paused():
            state = self._manager._state_to_save(entries)
        options = _SaveOptions(epoch, metrics, metadata, False, {})
        h = _lib.ckpt_tiered_save_async(self._handle(), _step(step), state._h,
                                        options._h, durable)
        if not h:
            raise MemoryError("ckpt: cannot start a tiered save")
        return TierAsyncSave(h, self)

    def restore(self, entries, strict):
        """Fills the arrays of `entries`; (TierRestoreResult, [(name, kind,
        value)] for its blobs and metadata)."""
        state = _State(entries, for_load=True)
        result = TierRestoreResult(_call(_lib.ckpt_tiered_restore,
                                         self._handle(), state._h,
                                         1 if strict else 0, out=True))
        out = []
        if result.tier != "none":
            for i, item in enumerate(entries):
                if item[1] != "tensor":
                    out.append((item[0], item[1], state.bytes_of(i)))
        return result, out


def local_tier_list(url):
    return _call(_lib.ckpt_local_tier_list, _encode(url, "local tier URL"),
                 out=True)
