"""The safetensors dtypes as NumPy knows them: which NumPy dtype saves as
which, which a loaded tensor gets, and each dtype's width; and torch's.
"""


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

# The torch dtypes of a torch that has them (uint16..uint64 from 2.3, the
# float8 kinds from 2.1), by their safetensors dtype.
NEWER_TORCH = {"U16": "uint16", "U32": "uint32", "U64": "uint64",
               "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
_TORCH_NAMES = {}  # torch_names', made once torch is there


def torch_names(torch):
    """The safetensors dtype of each torch dtype ckpt saves, on the host
    (_values) and on a device (_device): bool, int8..int64, uint8,
    float16..float64, bfloat16 as BF16, and the unsigned and float8 dtypes
    of NEWER_TORCH where this torch has them. Made once."""
    if not _TORCH_NAMES:
        _TORCH_NAMES.update({
            torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8",
            torch.int16: "I16", torch.int32: "I32", torch.int64: "I64",
            torch.float16: "F16", torch.bfloat16: "BF16",
            torch.float32: "F32", torch.float64: "F64"})
        for stored, attr in NEWER_TORCH.items():
            if hasattr(torch, attr):
                _TORCH_NAMES[getattr(torch, attr)] = stored
    return _TORCH_NAMES


def torch_dtype(torch, dtype):
    """The torch dtype of a stored dtype name (uint8 for one this torch
    lacks: its bits)."""
    found = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8,
             "I16": torch.int16, "I32": torch.int32, "I64": torch.int64,
             "F16": torch.float16, "BF16": torch.bfloat16,
             "F32": torch.float32, "F64": torch.float64}.get(dtype)
    if found is None:
        attr = NEWER_TORCH.get(dtype, "uint8")
        found = getattr(torch, attr, torch.uint8)
    return found
