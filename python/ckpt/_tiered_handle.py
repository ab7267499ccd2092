"""The library's tiers handle (ckpt_tiered_t) and its saves: what Tiers
(_tiers.py) drives.
"""

import ctypes

from ckpt._lib import _Owned, _call, _encode, _lib, _make
from ckpt._records import TierRestoreResult, TierSaveResult
from ckpt._save_options import _SaveOptions, _step
from ckpt._state import _State, gc_paused


_TIER_BY_INTERVAL, _TIER_DURABLE, _TIER_SKIP_DURABLE = 0, 1, 2


class TierAsyncSave(_Owned):
    """A tiered save running in the background (Tiers.save_async)."""

    _free = "ckpt_tier_save_destroy"

    def __init__(self, handle, tiers):
        super().__init__(handle)
        self._tiers = tiers  # the tiers outlive their saves' handles

    def wait(self):
        """Blocks until the save is done and returns its TierSaveResult,
        or raises its error (every call gives the same outcome)."""
        return TierSaveResult(_call(_lib.ckpt_tier_save_wait,
                                    self._handle(), out=True))

    def done(self):
        """True once wait() would not block."""
        return bool(_lib.ckpt_tier_save_done(self._handle()))


class Tiered(_Owned):
    """ckpt_tiered_t: what Tiers (_manager.py) drives."""

    _free = "ckpt_tiered_close"

    def __init__(self, manager, local_url, local_every, durable_every, keep,
                 replicas, replication_rate, nodes):
        super().__init__(None)
        self._manager = manager  # the durable manager outlives the tiers
        nodes = [] if nodes is None else [int(n) for n in nodes]
        array = (ctypes.c_int * max(len(nodes), 1))(*nodes)
        self._h = _make(_lib.ckpt_tiered_open, manager._handle(),
                        _encode(local_url, "local tier URL"),
                        int(local_every), int(durable_every), int(keep),
                        -1 if replicas is None else int(replicas),
                        float(replication_rate or 0),
                        array if nodes else None, len(nodes))

    @property
    def node(self):
        return _lib.ckpt_tiered_node(self._handle())

    def save(self, step, entries, epoch, metrics, metadata, durable):
        with gc_paused():
            state = self._manager._state_to_save(entries)
        options = _SaveOptions(epoch, metrics, metadata, False, {})
        return TierSaveResult(_call(_lib.ckpt_tiered_save, self._handle(),
                                    _step(step), state._h, options._h,
                                    durable, out=True))

    def save_async(self, step, entries, epoch, metrics, metadata, durable):
        with gc_paused():
            state = self._manager._state_to_save(entries)
        options = _SaveOptions(epoch, metrics, metadata, False, {})
        h = _lib.ckpt_tiered_save_async(self._handle(), _step(step), state._h,
                                        options._h, durable)
        if not h:
            raise MemoryError("ckpt: cannot start a tiered save")
        return TierAsyncSave(h, self)

    def restore(self, entries, strict):
        """Fills the arrays of `entries`; (TierRestoreResult, [(name, kind,
        value)] for its blobs and metadata)."""
        state = _State(entries, for_load=True)
        result = TierRestoreResult(_call(_lib.ckpt_tiered_restore,
                                         self._handle(), state._h,
                                         1 if strict else 0, out=True))
        out = []
        if result.tier != "none":
            for i, item in enumerate(entries):
                if item[1] != "tensor":
                    out.append((item[0], item[1], state.bytes_of(i)))
        return result, out


def local_tier_list(url):
    return _call(_lib.ckpt_local_tier_list, _encode(url, "local tier URL"),
                 out=True)
