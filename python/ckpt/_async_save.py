"""ckpt.AsyncSave: the library's handle of a save running in the
background.
"""

from ckpt._lib import _Owned, _call, _lib
from ckpt._records import SaveResult


class AsyncSave(_Owned):
    """A save running in the background (see
    CheckpointManager.save_async)."""

    _free = "ckpt_save_destroy"

    def __init__(self, handle, manager, state=None):
        super().__init__(handle)
        self._manager = manager  # the manager outlives its saves' handles
        self._root = manager.url  # for repr() after the manager's close()
        # Staged in the background: the state (and the arrays it borrows)
        # must live until the copy is done.
        self._state = state

    def wait_staged(self):
        """Blocks until the state has been copied into the library's
        staging memory, after which the arrays may change (at once, unless
        the save was started with stage_in_background=True); raises the
        copy's error, which wait() raises too."""
        try:
            _call(_lib.ckpt_save_wait_staged, self._handle())
        finally:
            self._state = None

    def wait(self):
        """Blocks until the save has committed and returns its SaveResult,
        or raises its error (every call gives the same outcome)."""
        try:
            return SaveResult(_call(_lib.ckpt_save_wait, self._handle(),
                                    out=True))
        finally:
            self._state = None

    def result(self, timeout=None):
        """wait(), by the name of the future dcp.async_save returns, so
        that code written for it runs unchanged. A timeout is refused: a
        save is waited for whole."""
        if timeout is not None:
            raise TypeError("AsyncSave.result(): a timeout is not supported "
                            "(the save is waited for whole); call result() "
                            "or wait(), or poll done()")
        return self.wait()

    def done(self):
        """True once wait() would not block."""
        return bool(_lib.ckpt_save_done(self._handle()))

    @property
    def step(self):
        return _lib.ckpt_save_step(self._handle())

    def __repr__(self):
        if not self._h:
            return f"ckpt.AsyncSave(root={self._root!r}, closed)"
        state = "done" if self.done() else "running"
        return (f"ckpt.AsyncSave(step={self.step}, root={self._root!r}, "
                f"{state})")
