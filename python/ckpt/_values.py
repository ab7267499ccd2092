"""Leaves of a state: how one Python value becomes one checkpoint entry.

  NumPy array or scalar  tensor, its own dtype (bool, int8..int64,
                         uint8..uint64, float16, float32, float64); the
                         ml_dtypes of JAX bfloat16, float8_e4m3fn and
                         float8_e5m2 as BF16, F8_E4M3 and F8_E5M2
  torch.Tensor (CPU)     tensor; bfloat16 is stored as BF16
  torch.Tensor (CUDA), any __cuda_array_interface__ object
                         tensor in device memory (ckpt._device)
  memoryview, array.array, any other object with the buffer protocol
                         tensor, dtype from its format, shape from its shape
  bytes, bytearray       blob
  int, float, str, bool, metadata entry {"python_type": T, "value": V}, so
  None                   that load returns the same Python type
  ckpt.Metadata          metadata entry holding that JSON object (one
                         with the keys of a typed scalar as {"python_type":
                         "metadata", "value": its object})
  ckpt.Shard(a, ...)     this rank's box of a tensor sharded across ranks
  ckpt.RankLocal(v)      an array or bytes that belong to this rank alone

Saving borrows the memory of C-contiguous, little-endian arrays, tensors
and buffers: no copy is made. Any other array (a transposed view, a
big-endian dtype) is first copied into a C-contiguous one.

NumPy is optional: without it, buffers are the tensors, and load() returns
tensors as memoryviews (ckpt._buffer).
"""

import ctypes
import json
import math
import re
import sys
import warnings
from collections.abc import Mapping

from ckpt import _buffer, _device, _dtypes, _errors, _state, _tree
from ckpt._tree import Metadata

try:
    import numpy as np
except ImportError:
    np = None

TYPE_KEY = "python_type"

# NumPy kinds with a safetensors dtype, and their allowed widths in bytes.
_SAVEABLE = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8)}

# Checkpoint dtypes NumPy has no type for; they load as integers this wide.
_RAW_DTYPES = {"BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}

# NumPy dtypes of the ml_dtypes package (JAX's bfloat16 and float8 kinds)
# that are exactly a checkpoint dtype, by name: matching the name needs no
# import of ml_dtypes, which the core package does without.
_ML_DTYPES = {"bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3",
              "float8_e5m2": "F8_E5M2"}

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class Shard:
    """This rank's piece of a tensor sharded across the ranks of a job.

    `value` (a NumPy array or CPU torch tensor) holds the box of the global
    tensor, of shape `global_shape`, that starts at `offsets` (one per
    dimension); its shape is the box's lengths. Across the ranks the boxes
    must tile the global shape; a rank that holds none of it (more ranks
    than rows) passes an empty box. save() writes each rank's piece; load()
    returns the whole tensor; load_into() fills the box from whatever pieces
    were saved, at any world size and any split.
    """

    __slots__ = ("value", "offsets", "global_shape")

    def __init__(self, value, offsets, global_shape):
        self.value = value
        self.offsets = [int(o) for o in offsets]
        self.global_shape = [int(d) for d in global_shape]

    def __repr__(self):
        return (f"ckpt.Shard(offsets={self.offsets}, "
                f"global_shape={self.global_shape})")


class RankLocal:
    """A value (array, tensor or bytes) that belongs to this rank alone,
    such as a data loader's position.

    Every rank saves its own value under the same name. At the world size
    that saved it, load() returns each rank its own value (unwrapped) and
    load_into() sets `.value` (bytes) or fills the array in place; at
    another world size, load_rank_local(name) returns every rank's value.
    """

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return f"ckpt.RankLocal({self.value!r})"


def holds_nothing(value):
    """True for a Shard whose box is empty while its tensor is not: the
    rank holds none of the tensor (more ranks than rows), so it offers no
    piece and fills nothing, though the entry stays in the state's tree."""
    return (isinstance(value, Shard) and math.prod(value.global_shape) > 0
            and 0 in tuple(getattr(value.value, "shape", ())))


def placement(name, value):
    """(inner value, placement tuple for _state) of a state leaf."""
    if isinstance(value, Shard):
        if len(value.offsets) != len(value.global_shape):
            raise _errors.InvalidArgument(
                f"entry {name!r}: a Shard needs one offset per dimension of "
                f"its global shape")
        return value.value, ("piece", value.global_shape, value.offsets)
    if isinstance(value, RankLocal):
        if isinstance(value.value, (bool, int, float, complex, str,
                                    type(None), Mapping, list, tuple)):
            raise _errors.InvalidArgument(
                f"entry {name!r}: a rank-local value must be a tensor, an "
                f"array or bytes, not {type(value.value).__name__} (a "
                f"number: ckpt.RankLocal(numpy.array(n)))")
        return value.value, ("local",)
    return value, None


def _loaded_torch():
    """torch, if the program imported it: only then can a value be a tensor."""
    return sys.modules.get("torch")


def _saveable(dtype):
    return dtype.itemsize in _SAVEABLE.get(dtype.kind, ())


def _ml_dtype(dtype):
    """The checkpoint dtype of an ml_dtypes NumPy dtype, else None."""
    return _ML_DTYPES.get(dtype.name)


def _unsupported(name, what):
    return _errors.InvalidArgument(
        f"entry {name!r}: {what} has no safetensors dtype (ckpt stores bool, "
        f"int8..int64, uint8..uint64, float16, bfloat16, float32, float64, "
        f"float8_e4m3fn, float8_e5m2)")


def _ml_array(array):
    """An ml_dtypes array as the unsigned integers of its bits, which the
    library stores under the dtype _ml_dtype names."""
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array.view(np.dtype(f"u{array.itemsize}"))


def _saveable_array(name, array):
    if not _saveable(array.dtype):
        raise _unsupported(name, f"NumPy dtype {array.dtype}")
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array


def _cpu_tensor(name, tensor, torch):
    if tensor.device.type != "cpu":
        raise _errors.InvalidArgument(
            f"entry {name!r}: the tensor is on {tensor.device}; ckpt saves "
            f"CPU and CUDA tensors (use tensor.cpu())")
    if tensor.layout != torch.strided:
        raise _errors.InvalidArgument(
            f"entry {name!r}: a {tensor.layout} tensor; ckpt saves dense "
            f"(strided) tensors")
    return tensor.detach()


def _tensor_array(name, tensor, torch):
    """A CPU tensor's memory (_state.HostMemory: its address, read from the
    tensor, with no NumPy view made; a state of many small tensors spends
    its time on such per-tensor steps), and the dtype to store (None: the
    memory's)."""
    if not tensor.is_cpu or tensor.layout != torch.strided:
        _cpu_tensor(name, tensor, torch)  # raises, naming what is wrong
    # No detach(): the address is read without autograd's say. A tensor
    # whose negative bit is set (x.conj().imag, a view) holds the negated
    # values in its memory: they are made real first.
    t = tensor if tensor.is_contiguous() and not tensor.is_neg() else \
        tensor.detach().resolve_neg().contiguous()
    dtype = _dtypes.torch_names(torch).get(t.dtype)
    if dtype is None:
        raise _unsupported(name, f"torch dtype {t.dtype}")
    return _state.HostMemory(t.data_ptr(), t.numel() * t.element_size(),
                             dtype, tuple(t.shape), t), None


def _torch_float8(torch, dtype):
    """The torch float8 dtype of safetensors dtype `dtype`, else None."""
    attr = _dtypes.NEWER_TORCH.get(dtype)
    return getattr(torch, attr, None) if dtype in _RAW_DTYPES and attr \
        else None


def _torch_saveable(torch):
    """torch dtypes that .numpy() turns into a saveable NumPy dtype."""
    return (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
            torch.int64, torch.float16, torch.float32, torch.float64)


def _metadata_json(name, obj):
    try:
        return json.dumps(obj, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise _errors.InvalidArgument(
            f"entry {name!r}: cannot be stored as JSON: {e}") from None


def _bad(name, why):
    return _errors.InvalidArgument(f"entry {name!r}: {why}")


def encode(name, value):
    """(kind, value, dtype) of the entry that stores `value`, for _state."""
    # A tensor first: it is neither Metadata nor NumPy, and a state of
    # many small tensors pays for every check on the way.
    torch = _loaded_torch()
    if torch is not None and isinstance(value, torch.Tensor) and \
            not value.is_cuda:
        return ("tensor", *_tensor_array(name, value, torch))
    if isinstance(value, Metadata):
        _tree.check_json(name, value)
        obj = dict(value)
        if _looks_typed(obj):
            # The user's map has the keys of a typed scalar: kept apart
            # from one, so that it loads as the Metadata it is.
            obj = {TYPE_KEY: "metadata", "value": obj}
        return "metadata", _metadata_json(name, obj), None
    if np is not None and (isinstance(value, np.ndarray) or (
            isinstance(value, np.generic) and (_saveable(value.dtype)
                                               or _ml_dtype(value.dtype)))):
        array = np.asarray(value)
        stored = _ml_dtype(array.dtype)
        if stored is not None:
            return "tensor", _ml_array(array), stored
        return "tensor", _saveable_array(name, array), None
    if _device.is_device_value(value, torch):
        return "tensor", _device.device_array(name, value, torch, False), None
    if torch is not None and isinstance(value, torch.Tensor):
        return ("tensor", *_tensor_array(name, value, torch))
    if isinstance(value, (bytes, bytearray)):
        return "blob", bytes(value), None
    if _buffer.has_buffer(value):
        return "tensor", _buffer.open_buffer(name, value, False, _bad), None
    if value is None:
        scalar = {TYPE_KEY: "none"}
    elif isinstance(value, bool):
        scalar = {TYPE_KEY: "bool", "value": bool(value)}
    elif isinstance(value, int):
        v = int(value)
        # JSON numbers beyond 64 bits do not survive every parser.
        scalar = {TYPE_KEY: "int",
                  "value": v if _INT64_MIN <= v <= _INT64_MAX else str(v)}
    elif isinstance(value, float):
        v = float(value)
        scalar = {TYPE_KEY: "float", "value": v if math.isfinite(v) else repr(v)}
    elif isinstance(value, str):
        problem = _tree.text_problem(value)
        if problem is not None:
            raise _bad(name, f"the str cannot be saved: {problem}")
        scalar = {TYPE_KEY: "str", "value": str(value)}
    else:
        raise _errors.InvalidArgument(
            f"entry {name!r}: ckpt cannot save a value of type "
            f"{type(value).__name__} (it "
            f"saves NumPy arrays, torch tensors, bytes, int, float, str, bool, "
            f"None, ckpt.Metadata, and dicts, lists and tuples of them)"
            f"{_what_to_save(value)}")
    return "metadata", _metadata_json(name, scalar), None


def _what_to_save(value):
    """For a value ckpt cannot save, what of it can be saved, if it says."""
    if callable(getattr(value, "state_dict", None)):  # a module, optimizer
        return (": save its state_dict(), or save the object itself with "
                "ckpt.torch.save, which takes objects with state_dict() and "
                "load_state_dict()")
    if callable(getattr(value, "get_state", None)):  # a torch.Generator
        return ": save its get_state()"
    return ""


def _looks_typed(obj):
    """Whether a metadata JSON object has the keys of a typed scalar."""
    return (isinstance(obj, dict) and TYPE_KEY in obj
            and set(obj) <= {TYPE_KEY, "value"})


_INT_TEXT = re.compile(r"-?[0-9]+")


def decode_metadata(text, name="", where="load"):
    """The Python value of a metadata entry's JSON.

    A typed scalar ({"python_type": T, "value": V}) whose value does not fit
    its type was not written by ckpt: ckpt.DataLoss, naming the entry and
    `where` (the operation and the checkpoint).
    """
    obj = json.loads(text)
    if not _looks_typed(obj):
        return Metadata(obj)
    kind, v = obj[TYPE_KEY], obj.get("value")
    if kind == "none" and "value" not in obj:
        return None
    if kind == "bool" and isinstance(v, bool):
        return v
    if kind == "int" and not isinstance(v, bool):
        if isinstance(v, int):
            return v
        if isinstance(v, str) and _INT_TEXT.fullmatch(v):
            try:
                return int(v)
            except ValueError:  # past Python's digits limit: not ckpt's
                pass
    if kind == "float" and not isinstance(v, bool):
        if isinstance(v, (int, float)):
            return float(v)
        if v in ("nan", "inf", "-inf"):
            return float(v)
    if kind == "str" and isinstance(v, str):
        return v
    if kind == "metadata" and isinstance(v, dict) and _looks_typed(v):
        return Metadata(v)
    if kind in ("none", "bool", "int", "float", "str", "metadata"):
        raise _errors.DataLoss(
            f"{where}: entry {name!r} is a {kind} whose stored value {v!r} "
            f"is not one; the entry is damaged")
    return Metadata(obj)


def decode_tensor(name, array, dtype, as_torch):
    """The value to return for a loaded tensor entry (see CheckpointManager.load)."""
    if np is None:
        return _decode_view(name, array, dtype, as_torch)
    if dtype == "BF16":
        try:
            import torch
        except ImportError:
            warnings.warn(
                f"entry {name!r} is bfloat16 and torch is not importable: "
                f"returning its raw bits as a uint16 array", stacklevel=3)
            return array
        return _from_numpy(torch, array.view(np.int16)).view(torch.bfloat16)
    if dtype in _RAW_DTYPES:
        if as_torch:
            import torch
            float8 = _torch_float8(torch, dtype)
            if float8 is not None:
                return _from_numpy(torch, array).view(float8)
        warnings.warn(
            f"entry {name!r} is {dtype}, which NumPy lacks: returning its "
            f"raw bits as a uint8 array (as_torch=True returns a torch "
            f"tensor of it, where torch has the dtype)", stacklevel=3)
        return array
    if not as_torch:
        return array
    import torch
    if array.dtype.kind == "u" and array.dtype.itemsize > 1 and \
            not hasattr(torch, array.dtype.name):
        warnings.warn(
            f"entry {name!r} is {array.dtype}, which torch {torch.__version__} "
            f"lacks: returning a NumPy array", stacklevel=3)
        return array
    return _from_numpy(torch, array)


def _from_numpy(torch, array):
    """torch.from_numpy, but a zero-size array (NumPy gives it strides 0)
    becomes a tensor with ordinary strides, as the saved one had: torch's
    .view(dtype) refuses stride 0."""
    t = torch.from_numpy(array)
    return torch.empty(t.shape, dtype=t.dtype) if t.numel() == 0 else t


def _decode_view(name, view, dtype, as_torch):
    """decode_tensor without NumPy: `view` is a memoryview."""
    if as_torch or dtype == "BF16":
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            kind = _dtypes.torch_dtype(torch, dtype)
            t = torch.frombuffer(view.obj, dtype=kind) if view.nbytes \
                else torch.empty(0, dtype=kind)
            return t.reshape(tuple(view.shape) if view.nbytes else (0,))
    if dtype in _RAW_DTYPES or dtype == "F16":
        warnings.warn(
            f"entry {name!r} is {dtype}, which a memoryview cannot hold: "
            f"returning its raw bits (format {view.format!r})",
            stacklevel=3)
    return view


def _refuse_overlap(name, shape, strides):
    """A load target whose elements share memory (an expand()ed tensor,
    a broadcast array made writable) holds one value where the checkpoint
    has several: refused, naming the entry, before anything is read."""
    if math.prod(shape) > 0 and any(st == 0 and n > 1
                                    for n, st in zip(shape, strides)):
        raise _errors.InvalidArgument(
            f"entry {name!r}: the target's elements share memory (shape "
            f"{list(shape)}, strides {list(strides)}: an expand()ed or "
            f"broadcast view); load into memory of its own (.clone(), "
            f".copy())")


def is_numpy_scalar(value):
    """np.float32(0.5), np.int64(7), np.bool_(True): immutable, so a load
    replaces it in its container, as a Python scalar."""
    return np is not None and isinstance(value, (np.number, np.bool_))


def scalar_target(value):
    """For a NumPy scalar, which cannot be filled in place: a new 0-d array
    of its dtype that load_into fills, and the scalar is then replaced in
    its container by the array's [()]. None for any other value."""
    return np.empty((), value.dtype) if is_numpy_scalar(value) else None


def fill_target(name, value, stored_dtype):
    """How load_into fills `value` in place.

    Returns None for a value that is not an array (load_into replaces it in
    its container), else (array, dtype, finish): `array` is the C-contiguous,
    writable NumPy array the checkpoint's bytes go into, `dtype` the stored
    dtype when NumPy cannot name it, and `finish` None when `array` is the
    value's own memory, or a function that copies `array` into the value
    (for non-contiguous or big-endian targets).
    """
    torch = _loaded_torch()
    if _device.is_device_value(value, torch):
        array = _device.device_array(name, value, torch, True)
        return array, _raw_device_dtype(array, stored_dtype), None
    if torch is not None and isinstance(value, torch.Tensor):
        t = _cpu_tensor(name, value, torch)
        _refuse_overlap(name, t.shape, t.stride())
        finish = None
        # A tensor with its negative bit set holds the negated values in
        # its memory: filled through a buffer, as copy_ writes it rightly.
        if not t.is_contiguous() or t.is_neg():
            target, t = t, torch.empty(tuple(t.shape), dtype=t.dtype)

            def finish(src=t, dst=target):
                with torch.no_grad():
                    dst.copy_(src)
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy(), "BF16", finish
        stored = _dtypes.torch_names(torch).get(t.dtype)
        if stored in _RAW_DTYPES:  # float8: filled as its bits
            return t.view(torch.uint8).numpy(), stored, finish
        if stored in _dtypes.NEWER_TORCH:  # uint16..uint64: NumPy has them
            array = t.numpy()
            return array, _raw_dtype(array.dtype, stored_dtype), finish
        if t.dtype not in _torch_saveable(torch):
            raise _unsupported(name, f"torch dtype {t.dtype}")
        array = t.numpy()
        return array, _raw_dtype(array.dtype, stored_dtype), finish
    if isinstance(value, (bytes, bytearray)):
        return None
    if np is None or not isinstance(value, np.ndarray):
        if not _buffer.has_buffer(value):
            return None
        buf = _buffer.open_buffer(name, value, True, _bad)
        raw = _RAW_DTYPES.get(stored_dtype)
        if raw is not None and buf.dtype in ("U8", "I8", "U16", "I16") and \
                _dtypes._WIDTHS[buf.dtype] == raw:
            return buf, stored_dtype, None
        return buf, None, None
    if isinstance(value, np.ndarray):
        if not _saveable(value.dtype):
            raise _unsupported(name, f"NumPy dtype {value.dtype}")
        if not value.flags.writeable:
            raise _errors.InvalidArgument(
                f"entry {name!r}: the array is read-only; load_into fills "
                f"arrays in place")
        _refuse_overlap(name, value.shape, value.strides)
        dtype = _raw_dtype(value.dtype, stored_dtype)
        if value.flags.c_contiguous and value.dtype.byteorder != ">":
            return value, dtype, None
        staging = np.empty(value.shape, value.dtype.newbyteorder("="))
        return staging, dtype, lambda: np.copyto(value, staging)
    return None


class Fresh:
    """Memory of its own for one load_into target: the load reads into
    `value`, and only once the whole load has succeeded does copy() give
    the caller's `target` those bytes (or swap() exchange the two, so that
    a second swap() puts the target's bytes back)."""

    __slots__ = ("target", "value", "_copy", "_clone", "_exchange")

    def __init__(self, target, value, copy, clone, exchange=None):
        self.target, self.value = target, value
        self._copy, self._clone, self._exchange = copy, clone, exchange

    def copy(self):
        self._copy(self.value, self.target)

    def swap(self, scratch):
        """`scratch`: a dict the caller keeps for one swap of many values,
        in which an exchange may keep a buffer it reuses."""
        if self._exchange is not None:
            self._exchange(self.target, self.value, scratch)
            return
        held = self._clone(self.value)
        self._copy(self.target, self.value)
        self._copy(held, self.target)


# The most bytes a torch exchange holds aside at a time (_exchange_tensors)
# in host memory: slices that stay in the cores' caches between the three
# copies of each, so an exchange moves each byte of both tensors once in
# and once out of memory; with slices of 64 MiB it took 0.27-0.29 s for
# 1 GiB, with 4 MiB 0.10 s (one copy: 0.064 s; docs/benchmarks.md).
_EXCHANGE_BYTES = 4 << 20
# The same on a device, where each copy is a kernel launch: larger slices.
_EXCHANGE_DEVICE_BYTES = 64 << 20


def _exchange_tensors(torch, a, b, scratch):
    """Exchanges the bytes of `a` and `b` (same shape and dtype; `b`
    contiguous) a slice at a time through one buffer a device of at most
    _EXCHANGE_BYTES (_EXCHANGE_DEVICE_BYTES off the host), kept in
    `scratch` for the next tensors: a clone of each tensor would take a
    state's worth of new memory, whose pages cost more to fault in than
    the copies."""
    with torch.no_grad():
        if a.is_contiguous():
            a, b = a.view(-1), b.view(-1)
        if a.dim() == 0 or a.numel() == 0:
            held = b.clone()
            b.copy_(a)
            a.copy_(held)
            return
        most = (_EXCHANGE_BYTES if a.device.type == "cpu"
                else _EXCHANGE_DEVICE_BYTES)
        row = max(1, a[0].numel() * a.element_size())
        rows = max(1, most // row)
        need = min(rows, a.shape[0]) * row
        buf = scratch.get(a.device)
        if buf is None or buf.numel() < need:
            buf = torch.empty(max(need, min(most, row * a.shape[0])),
                              dtype=torch.uint8, device=a.device)
            scratch[a.device] = buf
        for i in range(0, a.shape[0], rows):
            j = min(i + rows, a.shape[0])
            held = buf[:(j - i) * row].view(a.dtype).view((j - i,)
                                                          + tuple(a.shape[1:]))
            held.copy_(b[i:j])
            b[i:j].copy_(a[i:j])
            a[i:j].copy_(held)


def staged_by_library(value):
    """A device array the package cannot copy (no copy()): the library
    reads device memory into its staging memory and copies it to the device
    only once every rank has read its part whole, so filling such an array
    directly changes it only with a load that succeeds."""
    torch = _loaded_torch()
    if torch is not None and isinstance(value, torch.Tensor):
        return False
    return (_device.is_device_value(value, torch)
            and not callable(getattr(value, "copy", None)))


def cpu_tensor_bytes(value):
    """The bytes of `value` if it is a CPU tensor, else 0."""
    torch = _loaded_torch()
    if (torch is None or not isinstance(value, torch.Tensor)
            or value.device.type != "cpu"):
        return 0
    return value.numel() * value.element_size()


def fresh_target(name, value, stored_dtype, lease=None):
    """fill_target's answer for a load that must change nothing unless it
    succeeds whole: None for a value that is not an array, else (array,
    dtype, fresh), `array` being new memory shaped as `value` (on its
    device; a CPU tensor's from `lease`, a _load_memory lease, if given)
    that the checkpoint's bytes go into and `fresh` the Fresh that later
    hands them to `value`."""
    torch = _loaded_torch()
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type == "cpu":
            _cpu_tensor(name, value, torch)
        elif value.layout != torch.strided:
            raise _bad(name, f"a {value.layout} tensor; ckpt loads dense "
                             f"tensors")
        _refuse_overlap(name, value.shape, value.stride())
        if lease is not None and value.device.type == "cpu":
            new = lease.empty_like(value)
        else:
            new = torch.empty(value.shape, dtype=value.dtype,
                              device=value.device)
        array, dtype, _ = fill_target(name, new, stored_dtype)

        def copy(src, dst):
            with torch.no_grad():
                dst.copy_(src)

        return array, dtype, Fresh(
            value, new, copy, torch.clone,
            lambda a, b, scratch: _exchange_tensors(torch, a, b, scratch))
    if _device.is_device_value(value, torch):
        # CuPy, Numba and the like: their own copy() and slice assignment.
        try:
            new = value.copy()
        except Exception as e:  # noqa: BLE001 - any failure is the reason
            raise _bad(name, f"a load reads into new memory first "
                             f"(transactional=True), and this "
                             f"{type(value).__name__} cannot be copied "
                             f"({type(e).__name__}: {e}); pass "
                             f"transactional=False to fill it directly"
                       ) from None
        array, dtype, _ = fill_target(name, new, stored_dtype)

        def put(src, dst):
            dst[...] = src

        return array, dtype, Fresh(value, new, put, lambda a: a.copy())
    if isinstance(value, (bytes, bytearray)):
        return None
    if np is not None and isinstance(value, np.ndarray):
        if not _saveable(value.dtype):
            raise _unsupported(name, f"NumPy dtype {value.dtype}")
        if not value.flags.writeable:
            raise _errors.InvalidArgument(
                f"entry {name!r}: the array is read-only; load_into fills "
                f"arrays in place")
        _refuse_overlap(name, value.shape, value.strides)
        new = np.empty(value.shape, value.dtype.newbyteorder("="))
        return (new, _raw_dtype(value.dtype, stored_dtype),
                Fresh(value, new, lambda src, dst: np.copyto(dst, src),
                      np.copy))
    if not _buffer.has_buffer(value):
        return None
    got = fill_target(name, value, stored_dtype)  # checks it, as in place
    target, dtype = got[0], got[1]

    def new_buffer():
        b = _buffer.Buffer(bytearray(target.nbytes), target.dtype, True)
        b.shape = list(target.shape)
        return b

    def move(src, dst):
        if target.nbytes:
            ctypes.memmove(dst.address, src.address, target.nbytes)

    def clone(src):
        out = new_buffer()
        move(src, out)
        return out

    new = new_buffer()
    return new, dtype, Fresh(target, new, move, clone)


def _raw_device_dtype(array, stored_dtype):
    """The stored dtype where NumPy-less raw bits fill a device array of an
    integer dtype as wide (as _raw_dtype does for host arrays)."""
    raw = _RAW_DTYPES.get(stored_dtype)
    if raw is not None and array.dtype[0] in "IU" and \
            _dtypes._WIDTHS[array.dtype] == raw:
        return stored_dtype
    return None


def _raw_dtype(array_dtype, stored_dtype):
    """The stored dtype, where NumPy lacks it and an integer array as wide
    receives its raw bits; else None (the array's own dtype)."""
    if (stored_dtype in _RAW_DTYPES and array_dtype.kind in "iu"
            and array_dtype.itemsize == _RAW_DTYPES[stored_dtype]):
        return stored_dtype
    return None


def blob_kind(value):
    """The entry kind load_into asks for, for a value that is not an array."""
    return "blob" if isinstance(value, (bytes, bytearray)) else "metadata"
