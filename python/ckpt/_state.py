"""A library state (ckpt_state_t) over Python values.

Entries reach it as flat (name, kind, value, dtype[, placement]) tuples
(see _manager.py and _values.py): a tensor's value is a NumPy array, a
_buffer.Buffer, a HostMemory (a CPU torch tensor's) or a
_device.DeviceArray, whose memory the library reads or fills in place.
"""

import array as _array
import contextlib
import ctypes
import gc
import itertools

from ckpt import _buffer, _device
from ckpt._dtypes import _NUMPY_DTYPES, _NUMPY_TYPES, _WIDTHS, _np
from ckpt._errors import InvalidArgument
from ckpt._lib import _Entry, _Owned, _call, _encode, _lib


_KINDS = {"tensor": 0, "blob": 1, "metadata": 2}
_KIND_NAMES = {v: k for k, v in _KINDS.items()}
_PLACE_WHOLE, _PLACE_RANK_LOCAL, _PLACE_PIECE = 0, 1, 2


@contextlib.contextmanager
def gc_paused():
    """Pauses Python's cycle collector while a save or load makes objects
    by the thousand (tuples, arrays, tensors; no cycles among them): each
    run of the collector walks every tracked object, and 10,000 tensors
    set it off often enough to cost a good part of such a save
    (docs/benchmarks.md, "Many small tensors from Python"). Re-enabled
    after, unless it was off before; a thread that pauses it meanwhile
    sees it off and leaves it to the first."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _bad_entry(name, why):
    return InvalidArgument(f'entry "{name}": {why}')


def _int64s(values):
    return (ctypes.c_int64 * len(values))(*values)


def _address(array):
    """The address of a NumPy array's first byte: through ctypes, faster
    than __array_interface__, which builds a dict (docs/benchmarks.md,
    "Figures behind the library's constants"), except for an empty array,
    which ctypes cannot take a buffer of."""
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
        # a ctypes struct field by field, for 10,000 small tensors, was most
        # of a save (docs/benchmarks.md, "Many small tensors from Python").
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
                # A number as RankLocal is refused earlier, with how to
                # wrap it (_values.placement); this is any other value.
                if e.placement != _PLACE_WHOLE:
                    raise _bad_entry(name, "only a tensor, an array or bytes "
                                           "can be a shard or rank-local")
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
