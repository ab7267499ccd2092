"""The binding to libckpt.so: ctypes over the C API (include/ckpt/c.h).

Every call into the library goes through this module: it loads the shared
library (ckpt/_lib/libckpt.so.1 beside the package, or $CKPT_LIBRARY),
declares each C function's signature and turns status codes into ckpt.Error
subclasses and the library's JSON text into Python objects. ctypes
releases the GIL for the length of every call, so other threads run while
the library reads and writes. _Owned is a library handle; the modules of
the handles (_catalog, _communicator, _state, _manager_handle,
_async_save, _tiered_handle) build on it.
"""

import ctypes
import json
import os

from ckpt._errors import (_CODES, Error, FailedPrecondition, InvalidArgument,
                          _error)

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIB_DIR = os.path.join(_HERE, "_lib")
ABI_VERSION = 1


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
    "ckpt_catalog_open_ex": (_i, [_s, _i, _err, _err]),
    "ckpt_catalog_check": (_i, [_s, _s, _i64, _s, _err]),
    "ckpt_catalog_close": (None, [_p]),
    "ckpt_catalog_url": (_s, [_p]),
    "ckpt_catalog_jobs": (_i, [_p, _err, _err]),
    "ckpt_catalog_latest": (_i, [_p, _s, _err, _err]),
    "ckpt_catalog_best": (_i, [_p, _s, _s, _i, _err, _err]),
    "ckpt_catalog_ranked": (_i, [_p, _s, _s, _i, _err, _err]),
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
    "ckpt_save_options_set_compression": (_i, [_p, _s, _i, _err]),
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
    "ckpt_manager_delete_report": (_i, [_p, _i64, _i, _i, _err, _err]),
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
    writes the package names itself (_fill._partly_written): the
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
