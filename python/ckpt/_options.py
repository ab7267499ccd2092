"""The names ckpt.open takes, checked where an integration takes them and
opens its managers later (at the first save): a misspelled option is told
at once, not an epoch into training."""

from ckpt import _manager, _option_names


def check_names(what, options, own=()):
    """Raises TypeError, as a call would, for a name in `options` that
    CheckpointManager does not take, naming the nearest one it does or the
    caller's `own` keywords (a typo of one of those lands in `options`)."""
    _option_names.check(what, options, _manager.CheckpointManager, own)
