"""The names ckpt.open takes, checked where an integration takes them and
opens its managers later (at the first save): a misspelled option is told
at once, not an epoch into training."""

import difflib
import inspect

from ckpt import _manager


def check_names(what, options, own=()):
    """Raises TypeError, as a call would, for a name in `options` that
    CheckpointManager does not take, naming the nearest one it does or the
    caller's `own` keywords (a typo of one of those lands in `options`)."""
    known = [name for name in inspect.signature(
        _manager.CheckpointManager.__init__).parameters
        if name not in ("self", "url")]
    for name in options:
        if name not in known:
            close = difflib.get_close_matches(name, known + list(own), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{what} got an unexpected keyword argument "
                            f"{name!r} (not a CheckpointManager option{hint})")
