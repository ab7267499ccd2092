"""The asynchronous saves a CheckpointManager has started and nobody has
waited for: what its wait() and close() wait for (_manager.py).
"""

import warnings

from ckpt._async_save import AsyncSave
from ckpt._errors import Error


class TrackedSave(AsyncSave):
    """An AsyncSave that remembers whether a wait() has raised its error,
    so that closing the manager raises only an error nobody has seen."""

    seen = False

    def wait(self):
        try:
            return super().wait()
        except Error:
            self.seen = True
            raise


class PendingSaves:
    """The handles of a manager's save_async() calls since its last wait():
    the newest, and older ones that failed (a succeeded older save needs no
    more waiting)."""

    def __init__(self):
        self._saves = []

    def started(self, handle):
        """Records `handle`, a save the library has just started."""
        self.settled()
        self._saves.append(handle)

    def settled(self):
        """The library has just started a save, or made one: it waited for
        every earlier save first and took the error of one that failed,
        which that save then raised or carries, unless a wait() collected
        it. The earlier saves have been seen: none is left to wait for."""
        for save in self._saves:
            save.seen = True
        self._saves = []

    def wait(self):
        """Waits for every recorded save and forgets them; raises the first
        failure among them that nobody has seen (a failure is raised once:
        a loop that caught it from handle.wait() or a later save must not
        meet it again at its next mgr.wait())."""
        saves, self._saves = self._saves, []
        first = None
        for save in saves:
            error = _failure(save)
            if first is None and error is not None and not save.seen:
                first = error
            save.seen = True
        if first is not None:
            raise first

    def finish(self):
        """Waits for every recorded save and forgets them; the first failure
        that no wait() raised and no later save carried, or None."""
        saves, self._saves = self._saves, []
        unseen = None
        for save in saves:
            error = _failure(save)
            if error is not None and not save.seen and unseen is None:
                unseen = error
        return unseen


def _failure(save):
    """Waits for `save`: its error, or None when it committed (or was
    skipped)."""
    try:
        AsyncSave.wait(save)
    except Error as e:
        return e
    return None


def report_unclosed(pending, url):
    """A manager collected (or alive at exit) without close(): waits for
    its saves in flight and warns of the first failure nobody saw, which
    close() would have raised; a failed save_async is not lost silently."""
    unseen = pending.finish()
    if unseen is not None:
        warnings.warn(
            f"the manager of {url} was never closed, and a save_async of it "
            f"failed without anyone waiting for it: {unseen} (close() or "
            f"wait() raises such a failure)", RuntimeWarning, stacklevel=1)
