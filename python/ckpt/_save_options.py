"""The options of one save (ckpt_save_options_t), the check of a step
number and of the metrics, shared by the manager's saves and the tiers';
and how a save's error names the save.
"""

import difflib
import numbers
import operator

from ckpt._errors import InvalidArgument
from ckpt._lib import _Owned, _call, _encode, _lib
from ckpt._state import _int64s


_MAX_STEP = 2**63 - 1


def _step(step):
    if step is None:
        return -1
    # Any integer type (a NumPy int64 counter too), but not a bool.
    if isinstance(step, bool) or not hasattr(type(step), "__index__"):
        raise TypeError(f"a step must be an int, not {type(step).__name__}")
    step = operator.index(step)
    if step < 0:
        raise InvalidArgument(f"step {step} is negative")
    # Passed on as a 64-bit integer: a larger one would wrap to another
    # step (and a delete delete that one).
    if step > _MAX_STEP:
        raise InvalidArgument(
            f"step {step} is too large: a step is an integer from 0 to "
            f"{_MAX_STEP}")
    return step


_COMPRESSION_MODES = ("off", "zstd", "auto")


def compression_arguments(mode, level):
    """(mode, level) checked: a mode name and an int level."""
    if mode not in _COMPRESSION_MODES:
        close = difflib.get_close_matches(str(mode), _COMPRESSION_MODES, n=1)
        raise InvalidArgument(
            f"compression must be one of {', '.join(_COMPRESSION_MODES)}, "
            f"not {mode!r}" + (f"; did you mean {close[0]!r}?" if close
                               else ""))
    if isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(
            f"compression_level must be an int, not {type(level).__name__}")
    return mode, level


def save_compression(compression):
    """A save's compression argument: None (the manager's), a mode, or a
    (mode, level) pair."""
    if compression is None:
        return None
    if isinstance(compression, tuple) and len(compression) == 2:
        return compression_arguments(*compression)
    return compression_arguments(compression, 1)


class _SaveOptions(_Owned):
    _free = "ckpt_save_options_destroy"

    def __init__(self, epoch, metrics, metadata, incremental, dirty_rows,
                 compression=None):
        super().__init__(_lib.ckpt_save_options_create())
        h = self._h
        if compression is not None:  # (mode, level), checked by the caller
            _call(_lib.ckpt_save_options_set_compression, h,
                  compression[0].encode(), int(compression[1]))
        if isinstance(epoch, bool) or not hasattr(type(epoch), "__index__"):
            raise TypeError(
                f"epoch must be an int, not {type(epoch).__name__}")
        _lib.ckpt_save_options_set_epoch(h, operator.index(epoch))
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


_CXX_CARRIED = "no Wait() collected that error"
_CARRIED = ("no wait() (of its handle, or the manager's) collected that "
            "error")


def carried(error):
    """Whether `error`, a save's, is the error of an earlier save_async
    that nothing waited for, which the library reported in this save's
    place: that failure has then been raised, and close() or the
    manager's wait() must not raise it again."""
    return _CXX_CARRIED in str(error) or _CARRIED in str(error)


def name_the_save(error, step, url):
    """Prefixes the message of `error`, a ckpt.Error that a save of `step`
    to the root `url` raised, with "save step N to ROOT: ", unless it names
    the root already (the library's errors of a save mostly do: "save step
    N in ROOT: ..."). The checks of the state, the metadata and the
    entries' names know the entry, not the call they were made for."""
    text = str(error)
    # The library's words for an earlier save_async's error carried here
    # name its C++ call; Python's is wait().
    if _CXX_CARRIED in text:
        text = text.replace(_CXX_CARRIED, _CARRIED)
        error.args = (text,) + error.args[1:]
    if text.startswith(f"save step {step} ") or url in text:
        return
    # The same exception, its class and traceback kept: only the words.
    error.args = (f"save step {step} to {url}: {text}",) + error.args[1:]


def metric_name(key):
    if not isinstance(key, str):
        raise InvalidArgument(
            f"metrics must map str to numbers: the key {key!r} is a "
            f"{type(key).__name__}")
    return key


def metric_value(key, value):
    """A metric as a float: a Python, NumPy or 0-d tensor number."""
    if isinstance(value, numbers.Real):  # bool, int, float, NumPy's
        return float(value)
    if getattr(value, "ndim", None) == 0 and callable(
            getattr(value, "item", None)):  # a 0-d tensor or array
        item = value.item()
        if isinstance(item, numbers.Real):
            return float(item)
    shape = getattr(value, "shape", None)
    told = f" of shape {list(shape)}" if shape is not None else ""
    raise InvalidArgument(
        f"metrics[{key!r}] is a {type(value).__module__}."
        f"{type(value).__qualname__}{told}, not a number (metrics take "
        f"int, float, NumPy scalars and 0-d tensors)")
