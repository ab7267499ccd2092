"""The managers of this process that have written a root, and so hold its
lease until their close(): a second manager of the same root in the same
process (a notebook cell run again, ckpt.open(root) beside ckpt.torch's
own manager of it) would wait lease_wait_seconds (70 s by default) for a
lease this very process holds, and then fail naming this process's pid
with the advice to stop it. Said up front, and in the error, instead.
"""

import os
import warnings
import weakref

from ckpt import _errors, _roots

_writers = weakref.WeakSet()


def wrote(mgr):
    """`mgr` has saved: it holds its root's lease until close()."""
    _writers.add(mgr)


def _holder(mgr):
    """Another open manager of this process that holds `mgr`'s root."""
    if not mgr._options.get("lease_seconds", 1) or \
            mgr._options.get("break_lease") or mgr.world_size > 1:
        return None  # no lease to wait for, taken by force, or by rank 0
    try:
        root = _roots.key(mgr.url)
        for other in list(_writers):
            if other is not mgr and not other.closed and \
                    other._options.get("lease_seconds", 1) and \
                    _roots.key(other.url) == root:
                return other
    except (OSError, ValueError):
        pass
    return None


def _why(other):
    return (f"another ckpt.CheckpointManager of this process (pid "
            f"{os.getpid()}), opened on {other.url}, saved there and holds "
            f"the root's lease until its close(): save through that one, or "
            f"close() it first")


def warn_before_save(mgr, step):
    """Warns when a save of `mgr` will wait for a manager of this process.
    A manager that has saved holds its lease: only its first save looks
    (the others' roots resolved), not every save."""
    if mgr in _writers:
        return
    other = _holder(mgr)
    if other is not None:
        warnings.warn(f"save step {step} to {mgr.url}: waits for the lease, "
                      f"which {_why(other)}", RuntimeWarning, stacklevel=3)


def explain(error, mgr):
    """Adds to `error`, a save's, that the lease it could not take is held
    by another manager of this process, when that is so."""
    other = _holder(mgr)
    if isinstance(error, _errors.FailedPrecondition) and other is not None:
        error.args = (f"{error.args[0]} (here the holder is {_why(other)})",
                      ) + error.args[1:]
