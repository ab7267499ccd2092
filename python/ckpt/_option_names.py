"""Whether the keyword names given for a CheckpointManager are its options:
a misspelled one is a TypeError naming the nearest option, for ckpt.open
(_manager.py) and for the integrations that open their managers later
(_options.py)."""

import difflib
import inspect


def check(what, options, cls, own=()):
    """Raises TypeError, as a call would, for a name in `options` that
    `cls` (CheckpointManager) does not take, naming the nearest one it does
    or the caller's `own` keywords (a typo of one of those lands in
    `options`)."""
    known = [name for name in inspect.signature(cls.__init__).parameters
             if name not in ("self", "url")]
    for name in options:
        if name not in known:
            close = difflib.get_close_matches(name, known + list(own), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{what} got an unexpected keyword argument "
                            f"{name!r} (not a CheckpointManager option{hint})")


def opening(url):
    """The call an option error of root `url` refuses: a job that opens
    several roots learns which."""
    return f"ckpt.open({url})"


def refused(url, error):
    """`error` (a TypeError or ckpt.InvalidArgument of an option's value)
    again, its message led by the open call of `url` it refuses."""
    return type(error)(f"{opening(url)}: {error}")
