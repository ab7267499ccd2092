"""The options of one save (ckpt_save_options_t) and the check of a step
number, shared by the manager's saves and the tiers'.
"""

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
        raise InvalidArgument(
            f"compression must be one of {', '.join(_COMPRESSION_MODES)}, "
            f"not {mode!r}")
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
