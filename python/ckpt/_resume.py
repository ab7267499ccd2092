"""A resume: the newest committed step that loads whole, skipping damaged
steps, and listing the steps again when one is deleted while it loads
(the CheckpointManager's and ckpt.torch's, where Python picks the step)."""

import warnings

from ckpt import _errors

# How many times a resume lists the steps again after the step it was
# loading was deleted: the library's kResumeMostRelistings (its resume's
# bound), so that a job that deletes steps faster than they load cannot
# hold a reader for ever.
MOST_RELISTINGS = 16


def first_whole(steps, attempt, where, relist, skipped=None):
    """attempt(step) for each of `steps` (oldest first, tried newest first)
    until one succeeds, skipping with a warning each that raises
    ckpt.DataLoss; DataLoss naming every step tried when none loads. A step
    deleted while it loaded (ckpt.NotFound, and relist() no longer lists
    it: the retention of a job saving beside this one) is no damage, and
    the newest may be newer now: the steps relist() gives are tried
    instead. `skipped`: (step, error) of steps skipped already, which the
    final error names too."""
    skipped = [] if skipped is None else skipped
    relisted = 0
    order = list(reversed(steps))
    while order:
        step = order.pop(0)
        try:
            return attempt(step)
        except _errors.DataLoss as e:
            skipped.append((step, e))
            warn_skipped(where, step, e)
        except _errors.NotFound:
            if relisted == MOST_RELISTINGS:
                raise
            now = relist()
            if step in now:
                raise
            relisted += 1
            order = list(reversed(now))
    raise all_damaged(where, skipped)


def warn_skipped(where, step, error, stacklevel=5):
    warnings.warn(f"{where}: skipped step {step}, which does not load whole "
                  f"({error}); trying the next older step", RuntimeWarning,
                  stacklevel=stacklevel)


def all_damaged(where, skipped):
    tried = "; ".join(f"step {s}: {e}" for s, e in skipped)
    return _errors.DataLoss(f"{where}: no committed step loads whole "
                            f"(tried {len(skipped)}, newest first): {tried}")
