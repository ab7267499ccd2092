"""Tiers: a local tier in front of a CheckpointManager's root
(docs/tiers.md), over the library's tiers handle (_tiered_handle.py).
"""

import os
import warnings

from ckpt import _errors, _state, _tiered_handle, _tree
from ckpt._fill import _fill_targets, _finish_fill
from ckpt._save_options import name_the_save


class Tiers:
    """A local tier in front of a CheckpointManager's root (made by
    CheckpointManager.tiers(); docs/tiers.md).

        mgr = ckpt.open("s3://bucket/run42", communicator=comm)
        with mgr.tiers("file:///dev/shm/run42", local_every=50,
                       durable_every=1000, replicas=1) as tiers:
            restored = tiers.restore(state)  # .tier: none, local, durable
            for step in range(restored.step + 1, steps):
                train_one_step()
                tiers.save_async(step, state)
    """

    def __init__(self, manager, local_url, local_every, durable_every, keep,
                 replicas, replication_rate, nodes):
        self._manager = manager
        _check_arguments(local_every, durable_every, keep, replicas,
                         replication_rate)
        self._t = _tiered_handle.Tiered(
            manager._m, os.fspath(local_url), local_every, durable_every,
            keep, replicas, replication_rate, nodes)

    @property
    def node(self):
        """This rank's node index."""
        return self._t.node

    @property
    def manager(self):
        """The durable tier's CheckpointManager."""
        return self._manager

    def save(self, step, state, metadata=None, epoch=None, metrics=None, *,
             durable=None):
        """Saves `state` as `step` to the tiers that are due by their
        intervals (durable=True: to the durable tier too; durable=False:
        never to it) and returns a TierSaveResult. A step no tier is due at
        is skipped. The local tier is a cache: its failure is
        result.local_error, not an exception; a durable tier's failure
        raises."""
        try:
            arguments = self._arguments(state, metadata, epoch, metrics)
            return self._t.save(step, *arguments, self._durable(durable))
        except _errors.Error as e:
            name_the_save(e, step, self._manager.url)
            raise

    def save_async(self, step, state, metadata=None, epoch=None,
                   metrics=None, *, durable=None):
        """The same in the background: returns once the state is copied
        (its arrays may change at once), with a handle whose wait() returns
        the TierSaveResult. One save is in flight at a time: the next call
        waits for it."""
        try:
            arguments = self._arguments(state, metadata, epoch, metrics)
            return self._t.save_async(step, *arguments,
                                      self._durable(durable))
        except _errors.Error as e:
            name_the_save(e, step, self._manager.url)
            raise

    def restore(self, state, *, strict=False):
        """Fills `state` in place (as load_into does) from the newest step
        that the local tiers, with peers' replicas, or the durable tier hold
        whole, and returns a TierRestoreResult (tier 'none', and `state`
        untouched, when nothing was saved yet). Every rank calls it. A job
        at another world size reshards the local tier's step, fetching the
        shares its nodes lack from their peers, unless its state has
        rank-local entries (then the durable tier's load decides)."""
        entries, finishers, paths, _ = _fill_targets(state, {})
        if strict:
            # The tree this package saves beside the entries: asked for, so
            # that it does not count as an entry the state lacks.
            entries.append((_tree.TREE_ENTRY, "metadata", None, None, None))
        result, values = self._t.restore(entries, strict)
        values = [v for v in values if v[0] != _tree.TREE_ENTRY]
        if result.tier != "none":
            _finish_fill(state, finishers, paths, values,
                         f"restore of step {result.step} from the "
                         f"{result.tier} tier")
        return result

    def close(self):
        """Waits for the save in flight and lets go of the tiers."""
        self._t.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _arguments(self, state, metadata, epoch, metrics):
        with _state.gc_paused():
            entries, epoch, metrics, metadata, _, _ = \
                self._manager._save_arguments(state, metadata, epoch,
                                              metrics, False, None)
        return entries, epoch, metrics, metadata

    @staticmethod
    def _durable(durable):
        if durable is None:
            return _tiered_handle._TIER_BY_INTERVAL
        return (_tiered_handle._TIER_DURABLE if durable else
                _tiered_handle._TIER_SKIP_DURABLE)


def local_tier(url):
    """What a node's local tier root holds, as `ckpt ls` of it shows: a
    list of dicts {rank, step, marked, world_size, bytes}, one per share."""
    return _tiered_handle.local_tier_list(os.fspath(url))


def _check_arguments(local_every, durable_every, keep, replicas,
                     replication_rate):
    """The arguments of tiers(), checked by their own names."""
    bad = []
    for name, value, least in (("local_every", local_every, 0),
                               ("durable_every", durable_every, 0),
                               ("keep", keep, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or \
                value < least:
            bad.append(f"{name}={value!r} (an int, at least {least})")
    if replicas is not None and (isinstance(replicas, bool) or not isinstance(
            replicas, int) or replicas < 0):
        bad.append(f"replicas={replicas!r} (None, or an int, at least 0)")
    if replication_rate is not None and (
            isinstance(replication_rate, bool)
            or not isinstance(replication_rate, (int, float))
            or not replication_rate >= 0):
        bad.append(f"replication_rate={replication_rate!r} (None, or bytes "
                   f"per second, at least 0)")
    if bad:
        raise _errors.InvalidArgument("tiers(): " + ", ".join(bad))
    if local_every == 0 and durable_every == 0:
        warnings.warn(
            "tiers(local_every=0, durable_every=0): no save is due at any "
            "step, so every save is skipped but save(..., durable=True)",
            RuntimeWarning, stacklevel=4)
