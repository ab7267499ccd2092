"""A Lightning checkpoint dict as a ckpt state, and back, exactly
(ckpt.lightning's values; docs/pytorch.md, "Lightning").

What ckpt holds as it is stays so: tensors of its dtypes (on the CPU or a
CUDA device), int, float, str, bool, None, bytes, and dicts with str or int
keys, lists and tuples of these. The rest is recorded, path by path, in the
metadata entry RECORD: an OrderedDict (and nn.Module's `_metadata` on it,
kept in EXTRA), a dict whose keys cannot name entries (kept as a list of
(key, value) pairs), bytearray, NumPy arrays and scalars, an
nn.Parameter, requires_grad, a tensor's device; anything else is
torch.save bytes that torch.load(weights_only=True) must read back when it
is saved, so that loading never unpickles more than that allows.
"""

import collections
import io

import torch

from ckpt import _errors, _tree

try:
    import numpy as np
except ImportError:
    np = None

STATE_VERSION = 1

# The top-level entries of a step: Lightning's dict, the values that only
# annotate it (an OrderedDict's _metadata), and the record of what was
# stored differently from how ckpt loads it.
CHECKPOINT, EXTRA, RECORD = "checkpoint", "extra", "ckpt_lightning"

_NATIVE_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16,
                  torch.int32, torch.int64, torch.float16, torch.bfloat16,
                  torch.float32, torch.float64)

# A dict key longer than this (bytes), or one that would make an entry name
# near ckpt's limit of 4096 bytes, is stored as a value instead.
_MAX_KEY_BYTES, _MAX_NAME_BYTES = 1024, 3072


class _CpuDefault:
    """map_location's default: every tensor on the CPU, as Lightning's
    TorchCheckpointIO loads."""

    def __repr__(self):
        return "<CPU>"


CPU = _CpuDefault()


class Encoder:
    """Lightning's dict as a ckpt state: what ckpt holds as it is stays so,
    anything else is recorded (`special`: path -> how to rebuild it)."""

    def __init__(self, copy, where):
        self.copy, self.where = copy, where
        self.special, self.extra = {}, []

    def state(self, checkpoint):
        body = self.value(checkpoint, (CHECKPOINT,), "checkpoint",
                          len(CHECKPOINT))
        record = [[list(path), info] for path, info in self.special.items()]
        return {CHECKPOINT: body, EXTRA: self.extra,
                RECORD: _tree.Metadata(version=STATE_VERSION,
                                       special=record)}

    def mark(self, path, **info):
        self.special.setdefault(path, {}).update(info)

    def value(self, value, path, show, length):
        kind = type(value)
        if kind is torch.Tensor or kind is torch.nn.Parameter:
            return self.tensor(value, path, show)
        if value is None or kind in (bool, int, float, bytes):
            return value
        if kind is str:
            if _tree.text_problem(value) is None:
                return value
        elif kind is bytearray:
            self.mark(path, bytearray=True)
            return bytes(value)
        elif kind is dict or kind is collections.OrderedDict:
            return self.mapping(value, path, show, length)
        elif kind is list or kind is tuple:
            return kind(self.value(v, path + (i,), f"{show}[{i}]",
                                   length + 1 + len(str(i)))
                        for i, v in enumerate(value))
        elif np is not None and kind is np.ndarray and _np_native(value):
            self.mark(path, numpy=True)
            return value.copy() if self.copy else value
        elif np is not None and isinstance(value, np.generic) and \
                _np_native(np.asarray(value)):
            self.mark(path, numpy_scalar=True)
            return np.asarray(value)
        return self.pickled(value, path, show)

    def tensor(self, t, path, show):
        if (t.layout != torch.strided or t.dtype not in _NATIVE_DTYPES
                or t.is_meta or t.is_quantized or t.is_nested
                or t.device.type not in ("cpu", "cuda")):
            return self.pickled(t, path, show)
        info = {}
        if type(t) is torch.nn.Parameter:
            info["parameter"] = True
        if t.requires_grad:
            info["requires_grad"] = True
        if t.device.type != "cpu":
            info["device"] = str(t.device)
        if info:
            self.mark(path, **info)
        t = t.detach()
        if self.copy:  # the caller changes its tensors once save returns
            t = t.to("cpu", copy=True, memory_format=torch.contiguous_format)
        return t

    def mapping(self, d, path, show, length):
        if type(d) is collections.OrderedDict:
            index = -1
            versions = getattr(d, "_metadata", None)  # nn.Module's
            if versions is not None:
                index = len(self.extra)
                self.extra.append(None)
                self.extra[index] = self.value(
                    versions, (EXTRA, index), f"{show}._metadata",
                    len(EXTRA) + 1 + len(str(index)))
            self.mark(path, odict=index)
        if _plain_keys(d, length):
            return {k: self.value(v, path + (k,), f"{show}[{k!r}]",
                                  length + 1 + len(str(k).encode()))
                    for k, v in d.items()}
        # Keys that cannot name entries: (key, value) pairs in a list.
        self.mark(path, items=True)
        return [[self.value(k, path + (i, 0), f"{show} key {k!r}",
                            length + 4 + len(str(i))),
                 self.value(v, path + (i, 1), f"{show}[{k!r}]",
                            length + 4 + len(str(i)))]
                for i, (k, v) in enumerate(d.items())]

    def pickled(self, value, path, show):
        kind = f"{type(value).__module__}.{type(value).__qualname__}"
        buffer = io.BytesIO()
        try:
            torch.save(value, buffer)
            data = buffer.getvalue()
            torch.load(io.BytesIO(data), map_location="cpu",
                       weights_only=True)
        except Exception as e:  # noqa: BLE001 - any refusal is the reason
            why = _refusal(e)
            raise _errors.InvalidArgument(
                f"save {self.where}: {show} is a {kind}, which ckpt stores "
                f"only as torch.save bytes that torch.load(weights_only="
                f"True) reads back, and it does not ({why}); make it a "
                f"tensor, number, str, bytes, None, dict, list or tuple, "
                f"or allowlist its class with torch.serialization."
                f"add_safe_globals in the processes that save and load"
            ) from None
        self.mark(path, torch=True)
        return data


def _refusal(error):
    """The reason in torch.load's error: its unpickler's line, without
    the advice around it."""
    text = str(error)
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text.split(marker, 1)[1].split(". Please use", 1)[0]
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else type(error).__name__


def _plain_keys(d, length):
    """Whether every key of `d` can be part of an entry name, with no two
    names alike ({"a.b": x} beside {"a": {"b": y}} would both be "a.b")."""
    names = []
    for k in d:
        if type(k) is int:
            if not -(1 << 63) <= k < (1 << 64):
                return False
        elif type(k) is str:
            size = len(k.encode("utf-8", "surrogatepass"))
            if (not k or size > _MAX_KEY_BYTES or "/" in k or "\\" in k
                    or any(ord(c) < 32 or ord(c) == 127 for c in k)
                    or _tree.text_problem(k, c_string=True) is not None):
                return False
        else:
            return False
        if length + 1 + len(str(k).encode()) > _MAX_NAME_BYTES:
            return False
        names.append(str(k))
    if len(set(names)) != len(names):
        return False
    dotted = [n for n in names if "." in n]
    if dotted:
        for k, v in d.items():
            if type(v) in (dict, collections.OrderedDict, list, tuple):
                prefix = f"{k}."
                if any(n.startswith(prefix) for n in dotted):
                    return False
    return True


def _np_native(array):
    kind, size = array.dtype.kind, array.dtype.itemsize
    widths = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8),
              "f": (2, 4, 8)}.get(kind, ())
    return size in widths and array.dtype.byteorder in "=|<"


def decode(state, map_location, weights_only, where):
    """The Lightning dict of a loaded step's `state`; `where` names the
    step in errors."""
    record = state.get(RECORD) if isinstance(state, dict) else None
    if not isinstance(record, dict) or CHECKPOINT not in state:
        raise _errors.DataLoss(f"{where}: the step holds no Lightning "
                               f"checkpoint (no {RECORD!r} entry)")
    version = record.get("version")
    if version != STATE_VERSION:
        raise _errors.FailedPrecondition(
            f"{where}: its checkpoint has version {version!r}; this "
            f"ckpt.lightning reads version {STATE_VERSION}")
    try:
        special = {tuple(path): dict(info)
                   for path, info in record["special"]}
    except (KeyError, TypeError, ValueError) as e:
        raise _errors.DataLoss(f"{where}: its {RECORD!r} entry is damaged "
                               f"({type(e).__name__}: {e})") from None
    decoder = _Decoder(special, state.get(EXTRA) or [], map_location,
                       weights_only is False)
    return decoder.value(state[CHECKPOINT], (CHECKPOINT,))


class _Decoder:
    """Rebuilds what Encoder recorded, children before their container."""

    def __init__(self, special, extra, map_location, unrestricted):
        self.special, self.extra = special, extra
        self.map_location, self.unrestricted = map_location, unrestricted
        self.extras = {}

    def value(self, node, path):
        kind = type(node)
        if kind is dict:
            node = {k: self.value(v, path + (k,)) for k, v in node.items()}
        elif kind is list or kind is tuple:
            node = kind(self.value(v, path + (i,))
                        for i, v in enumerate(node))
        info = self.special.get(path) or {}
        if info.get("numpy") or info.get("numpy_scalar"):
            return node[()] if info.get("numpy_scalar") else node
        if np is not None and isinstance(node, np.ndarray):
            node = torch.from_numpy(node)
        if isinstance(node, torch.Tensor):
            return self.tensor(node, info)
        if info.get("items"):
            node = {k: v for k, v in node}
        if "odict" in info:
            node = collections.OrderedDict(node)
            if info["odict"] >= 0:
                node._metadata = self.extra_value(info["odict"])
        if info.get("torch"):
            location = "cpu" if self.map_location is CPU \
                else self.map_location
            node = torch.load(io.BytesIO(node), map_location=location,
                              weights_only=not self.unrestricted)
        if info.get("bytearray"):
            node = bytearray(node)
        return node

    def extra_value(self, index):
        if index not in self.extras:
            self.extras[index] = self.value(self.extra[index],
                                            (EXTRA, index))
        return self.extras[index]

    def tensor(self, t, info):
        saved = info.get("device", "cpu")
        where = self.map_location
        if where is CPU:
            target = None
        elif where is None:
            target = saved
        elif isinstance(where, dict):
            target = where.get(saved, saved)
        elif callable(where):
            moved = where(t.untyped_storage(), saved)
            target = saved if moved is None else moved.device
        else:
            target = where
        if target is not None and torch.device(target) != t.device:
            t = t.to(target)
        if info.get("parameter"):
            return torch.nn.Parameter(t, requires_grad=bool(
                info.get("requires_grad")))
        if info.get("requires_grad"):
            t.requires_grad_(True)
        return t
