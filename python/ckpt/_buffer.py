"""Tensors from any object with the buffer protocol, without NumPy.

A memoryview, an array.array, or any other object exporting a buffer saves
as a tensor: its format gives the dtype, its shape the shape. The library
reads (or, for load_into, fills) the object's own memory: Buffer holds the
exported buffer (PyObject_GetBuffer, through ctypes) for as long as the
library may use it, so that the memory cannot move or be freed meanwhile.

Without NumPy, load() returns tensors as memoryviews over fresh bytearrays
(new_tensor); dtypes that a memoryview cannot carry (float16, bfloat16, the
float8 types) come back as their raw bits (unsigned integers as wide).
"""

import ctypes
import sys

# struct format character (native sizes, as on every platform ckpt builds
# for: 64-bit Linux) -> safetensors dtype.
_FORMATS = {"?": "BOOL", "b": "I8", "B": "U8", "c": "U8", "h": "I16",
            "H": "U16", "i": "I32", "I": "U32", "l": "I64", "L": "U64",
            "q": "I64", "Q": "U64", "n": "I64", "N": "U64", "e": "F16",
            "f": "F32", "d": "F64"}

# safetensors dtype -> the format a memoryview carries it in, and whether
# that is only its raw bits.
_LOADED = {"BOOL": ("?", False), "U8": ("B", False), "I8": ("b", False),
           "U16": ("H", False), "I16": ("h", False), "U32": ("I", False),
           "I32": ("i", False), "U64": ("Q", False), "I64": ("q", False),
           "F32": ("f", False), "F64": ("d", False), "F16": ("H", True),
           "BF16": ("H", True), "F8_E4M3": ("B", True),
           "F8_E5M2": ("B", True)}

_PyBUF_WRITABLE = 0x0001
_PyBUF_FORMAT = 0x0004
_PyBUF_ND = 0x0008
_PyBUF_STRIDES = 0x0010 | _PyBUF_ND
_PyBUF_C_CONTIGUOUS = 0x0020 | _PyBUF_STRIDES


class _PyBuffer(ctypes.Structure):
    # CPython's Py_buffer, unchanged since 3.3 and part of the stable ABI
    # since 3.11.
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p),
                ("len", ctypes.c_ssize_t), ("itemsize", ctypes.c_ssize_t),
                ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p),
                ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
                ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
                ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)),
                ("internal", ctypes.c_void_p)]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer),
                        ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


def has_buffer(value):
    try:
        memoryview(value).release()
    except TypeError:
        return False
    return True


def dtype_of_format(fmt):
    """The safetensors dtype of a struct format, or None."""
    if len(fmt) == 2 and fmt[0] in "@=<":
        fmt = fmt[1:]
    elif len(fmt) == 2 and fmt[0] in ">!" and sys.byteorder == "little":
        return None
    return _FORMATS.get(fmt)


class Buffer:
    """A C-contiguous buffer held open: `address`, `nbytes`, `dtype`,
    `shape`. close() (or garbage collection) releases it."""

    __slots__ = ("_view", "address", "nbytes", "dtype", "shape", "owner")

    def __init__(self, obj, dtype, writable):
        self._view = _PyBuffer()
        flags = _PyBUF_C_CONTIGUOUS | _PyBUF_FORMAT
        if writable:
            flags |= _PyBUF_WRITABLE
        _get_buffer(obj, ctypes.byref(self._view), flags)
        v = self._view
        self.owner = obj
        self.address = v.buf
        self.nbytes = v.len
        self.dtype = dtype
        self.shape = [v.shape[i] for i in range(v.ndim)] if v.ndim else []

    def close(self):
        if self._view is not None and self._view.obj:
            _release_buffer(ctypes.byref(self._view))
        self._view = None

    def __del__(self):
        self.close()


def open_buffer(name, value, writable, error):
    """A Buffer over `value`'s memory, or `error(name, why)` raised.

    A saved buffer that is not C-contiguous, or big-endian, is copied first
    (as NumPy arrays are); a load_into target must be filled in place, so
    there the same is refused.
    """
    view = memoryview(value)
    dtype = dtype_of_format(view.format)
    if dtype is None:
        raise error(name, f"buffer format {view.format!r} has no safetensors "
                          f"dtype")
    if writable and view.readonly:
        raise error(name, "the buffer is read-only; load_into fills buffers "
                          "in place")
    if not view.c_contiguous or view.format[:1] in (">", "!"):
        if writable:
            raise error(name, "the buffer is not C-contiguous or is "
                              "big-endian; load_into fills it in place")
        copy = bytearray(view.tobytes())
        if view.format[:1] in (">", "!"):
            _swap(copy, view.itemsize)
        fmt = view.format.lstrip("@=<>!")
        value = memoryview(copy).cast(fmt, view.shape) if 0 not in \
            view.shape else copy
        shape = list(view.shape)
        b = Buffer(value, dtype, False)
        b.shape = shape
        return b
    shape = list(view.shape)
    view.release()
    b = Buffer(value, dtype, writable)
    b.shape = shape
    return b


def _swap(data, width):
    for i in range(0, len(data), width):
        data[i:i + width] = data[i:i + width][::-1]


def new_tensor(dtype, shape):
    """(memoryview, bits_only) for a fresh tensor of `dtype` and `shape`."""
    fmt, bits_only = _LOADED[dtype]
    count = 1
    for d in shape:
        count *= d
    size = count * ctypes.sizeof({"?": ctypes.c_bool, "B": ctypes.c_uint8,
                                  "b": ctypes.c_int8, "H": ctypes.c_uint16,
                                  "h": ctypes.c_int16, "I": ctypes.c_uint32,
                                  "i": ctypes.c_int32, "Q": ctypes.c_uint64,
                                  "q": ctypes.c_int64, "f": ctypes.c_float,
                                  "d": ctypes.c_double}[fmt])
    data = bytearray(size)
    if count == 0:
        # A memoryview cannot have a zero in its shape: an empty one.
        return memoryview(data).cast(fmt), bits_only
    return memoryview(data).cast(fmt, list(shape)), bits_only
