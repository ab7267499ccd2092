"""Tensors in CUDA memory: PyTorch CUDA tensors and any object with the
__cuda_array_interface__ (CuPy, Numba, ...).

The library copies their bytes itself, through the CUDA driver it loads at
run time (docs/gpu.md): a save reads the device memory into its page-locked
staging memory, a load writes the device memory from it. No host copy is
made here. The copies wait for the stream the tensors were made on (PyTorch:
the current stream of their device; the interface: its "stream" field),
and a load's copies are done before load() returns.
"""

from ckpt import _dtypes, _errors

# __cuda_array_interface__ typestr -> safetensors dtype.
_TYPESTRS = {"|b1": "BOOL", "|u1": "U8", "|i1": "I8", "<i2": "I16",
             "<u2": "U16", "<i4": "I32", "<u4": "U32", "<i8": "I64",
             "<u8": "U64", "<f2": "F16", "<f4": "F32", "<f8": "F64"}

# The interface's stream numbers that name no stream object: 1 is the
# legacy default stream, 2 the per-thread default one; 0 is not allowed.
_NO_STREAM = (None, 1, 2)


class DeviceArray:
    """A C-contiguous tensor in the memory of CUDA device `device`: what
    _state hands the library for it."""

    __slots__ = ("address", "nbytes", "dtype", "shape", "device", "stream",
                 "owner")

    def __init__(self, address, nbytes, dtype, shape, device, stream, owner):
        self.address, self.nbytes, self.dtype = address, nbytes, dtype
        self.shape, self.device = list(shape), device
        self.stream, self.owner = stream, owner


def _bad(name, why):
    return _errors.InvalidArgument(f"entry {name!r}: {why}")


def is_device_value(value, torch):
    """Whether `value` lives in CUDA memory."""
    if torch is not None and isinstance(value, torch.Tensor):
        return value.device.type == "cuda"
    return hasattr(type(value), "__cuda_array_interface__") or hasattr(
        value, "__cuda_array_interface__")


def device_array(name, value, torch, for_load):
    """The DeviceArray of a CUDA tensor or __cuda_array_interface__ object."""
    if torch is not None and isinstance(value, torch.Tensor):
        return _torch_array(name, value, torch, for_load)
    return _interface_array(name, value, for_load)


def _torch_array(name, t, torch, for_load):
    if t.layout != torch.strided:
        raise _bad(name, f"a {t.layout} tensor; ckpt saves dense tensors")
    # A tensor with its negative bit set holds the negated values.
    if not t.is_contiguous() or t.is_neg():
        if for_load:
            raise _bad(name, f"the tensor on {t.device} is not contiguous "
                             f"(or a negated view), so a load cannot fill it "
                             f"in place; load into a contiguous tensor and "
                             f"copy it over")
        # As for host arrays, a save reads a contiguous copy. It is made on
        # the current stream, so it follows the work queued there, and the
        # DeviceArray holds it until the bytes are staged.
        t = t.resolve_neg().contiguous()
    dtype = _dtypes.torch_names(torch).get(t.dtype)
    if dtype is None:
        raise _bad(name, f"torch dtype {t.dtype} has no safetensors dtype")
    t = t.detach()
    device = t.device.index if t.device.index is not None else \
        torch.cuda.current_device()
    stream = torch.cuda.current_stream(device).cuda_stream
    return DeviceArray(t.data_ptr(), t.numel() * t.element_size(), dtype,
                       t.shape, device, stream, t)


def _interface_array(name, value, for_load):
    # `face` is read once: an object may build it anew at every access.
    try:
        face = value.__cuda_array_interface__
        shape = tuple(int(d) for d in face["shape"])
        typestr = face["typestr"]
        address, readonly = face["data"]
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise _bad(name, f"its __cuda_array_interface__ is not one ckpt "
                         f"reads ({type(e).__name__}: {e})") from None
    dtype = _TYPESTRS.get(typestr)
    if dtype is None:
        raise _bad(name, f"__cuda_array_interface__ typestr {typestr!r} has "
                         f"no safetensors dtype")
    width = _dtypes._WIDTHS[dtype]
    strides = face.get("strides")
    if strides is not None:
        expected, step = [], width
        for d in reversed(shape):
            expected.insert(0, step)
            step *= d
        if any(d > 1 and s != e for d, s, e in zip(shape, strides, expected)):
            raise _bad(name, "the device array is not C-contiguous")
    if for_load and readonly:
        raise _bad(name, "the device array is read-only; a load fills it")
    stream = face.get("stream")
    if stream == 0:
        raise _bad(name, "__cuda_array_interface__ stream 0 is not allowed "
                         "(it would be ambiguous)")
    nbytes = width
    for d in shape:
        nbytes *= d
    device = _device_of(value, face)
    return DeviceArray(int(address or 0), nbytes, dtype, shape, device,
                       0 if stream in _NO_STREAM else int(stream), value)


def _device_of(value, face):
    """The ordinal of the device the array's memory is on: the object's
    own `device` (CuPy: .device.id; Numba and others: an int), else 0 (the
    driver's copies find the device from the address itself; the ordinal
    picks the context whose stream orders them)."""
    device = getattr(value, "device", None)
    for attr in ("id", "index"):
        if hasattr(device, attr):
            device = getattr(device, attr)
    return device if isinstance(device, int) and device >= 0 else 0


def load_targets(device):
    """For load(device=...): (a function making each tensor to load into on
    that device, or None for host memory; whether the device is the CPU,
    for which load returns torch tensors in host memory)."""
    if device is None:
        return None, False
    try:
        import torch
    except ImportError:
        raise _errors.Unavailable(
            f"load(device={device!r}) makes torch tensors on the device: "
            f"PyTorch is not importable") from None
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as e:
        raise _errors.InvalidArgument(
            f"load(device={device!r}): not a device PyTorch knows ({e}); "
            f"\"cuda:0\", \"cpu\", or device=None for host memory "
            f"arrays") from None
    if device.type == "cpu":
        return None, True
    if device.type != "cuda":
        raise _errors.InvalidArgument(
            f"load(device={str(device)!r}): a CUDA device (\"cuda:0\"), "
            f"\"cpu\", or device=None for host memory arrays")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if (device.index or 0) >= count:
        raise _errors.Unavailable(
            f"load(device={str(device)!r}): this process sees "
            f"{count} CUDA device(s) (torch {torch.__version__}, "
            f"torch.cuda.is_available() {torch.cuda.is_available()}); "
            f"nothing was read")

    def new(name, dtype, shape):
        t = torch.empty(shape, dtype=_dtypes.torch_dtype(torch, dtype),
                        device=device)
        return device_array(name, t, torch, True)

    return new, False
