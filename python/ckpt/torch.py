"""ckpt.torch: PyTorch's distributed-checkpoint calls, on ckpt.

    import ckpt.torch as ct
    state = {"model": model, "optim": optimizer, "step": step}
    ct.save(state, "/data/run42", step)         # or ct.async_save(...)
    ct.load(state, "/data/run42")               # the newest, in place

Every rank of a torchrun job makes the same calls; ckpt's collectives run
on a gloo group of their own (ckpt.torch_communicator()), whatever backend
the job uses. What a state dict may hold, beside what ckpt.CheckpointManager
saves (tensors, scalars, bytes, nested dicts, lists and tuples):

  Stateful objects   anything with state_dict() and load_state_dict() (an
                     nn.Module, an optimizer, an object of the program's):
                     save() stores its state_dict(); load() fills that
                     state_dict()'s tensors in place, creates what the
                     checkpoint holds and it lacks (a fresh optimizer's
                     moments), then calls load_state_dict() with it
  DTensor            (PyTorch 2: FSDP2, tensor parallel) each rank's local
                     shard is its box of the global tensor: Shard(d) on any
                     mesh dimension, Replicate(), uneven shards; a box that
                     several ranks hold is written once. Loading fills each
                     rank's local shard from whatever split was saved:
                     another world size, mesh or placement
  ShardedTensor      (FSDP1) each rank's local shard, likewise (one local
                     shard per rank)

Tensors may be on the CPU or a CUDA device (read and filled in place, no
.cpu() copy). DTensor needs PyTorch 2.4 or later (HAS_DTENSOR is False
before); docs/pytorch.md says which releases are supported and tested.

`root` is a URL or path, or a ckpt.CheckpointManager for retention, the
catalog or other options (ckpt.open(url, keep_last=3,
communicator=ckpt.torch_communicator())). For a URL, this module opens one
manager per root and keeps it (and the root's lease) for the next calls of
the process; close() closes them (their saves in flight end and the
leases are given back at once).

consolidate(root, out_path, ...) writes a checkpoint as Hugging Face
safetensors: one model.safetensors, or several files and
model.safetensors.index.json beyond max_shard_size.

Sampler(dataset_or_len, num_replicas=None, rank=None, shuffle=True,
seed=0, drop_last=False) is a DistributedSampler whose state_dict() is one
position in the epoch for the whole job: loaded on another number of ranks
(or through torchdata's StatefulDataLoader), the epoch goes on with every
sample taken exactly once (ckpt._torch_sampler says more).

StorageWriter(root, **options) and StorageReader(root) are
torch.distributed.checkpoint's storage on ckpt: dcp.save, dcp.async_save
and dcp.load through them write and read ckpt checkpoint steps (one atomic
commit for every rank, every chunk checked; checkpoint_id: None, a step,
"ROOT" or "ROOT@STEP"; ckpt._torch_dcp says more).

import_dcp(directory, root, step) and export_dcp(root, step, directory)
bring a checkpoint of DCP's own FileSystemWriter into a ckpt root and
write a ckpt step as one DCP's FileSystemReader loads (what
`ckpt import-dcp` and `ckpt export --format dcp` run; DCP's pickled
.metadata is read admitting DCP's metadata classes only:
ckpt._dcp_files says more).
"""

import gc
import json
import os
from collections.abc import Mapping

import torch

from ckpt import (_dtypes, _errors, _manager, _resume, _roots, _torch_dist,
                  _tree, _values)
from ckpt._consolidate import consolidate
from ckpt._dcp_files import export_dcp, import_dcp
from ckpt import _torch_dcp
from ckpt._torch_dcp import StorageReader, StorageWriter
from ckpt._torch_sampler import Sampler
from ckpt._torch_shards import HAS_DTENSOR
from ckpt._torch_shards import dtensor_shard as _dtensor_shard
from ckpt._torch_shards import is_dtensor as _is_dtensor
from ckpt._torch_shards import is_sharded_tensor as _is_sharded_tensor
from ckpt._torch_shards import sharded_tensor_shard as _sharded_tensor_shard
from ckpt._torch_shards import shard_new_moments as _shard_new_moments
from ckpt._torch_shards import show as _show


__all__ = ["HAS_DTENSOR", "Sampler", "StorageReader", "StorageWriter",
           "async_save", "close", "consolidate", "export_dcp", "import_dcp",
           "latest", "load", "manager", "save"]

# _roots.key(url) -> (manager, its key): StorageWriter and StorageReader's
# cache (ckpt._torch_dcp), shared, so that save() and a dcp.save through
# ckpt's writer on one root in one process are one manager. A manager
# holds its root's lease between saves: two would wait for each other.
_managers, _lock = _torch_dcp._managers, _torch_dcp._lock


def save(state_dict, root, step, *, communicator=None, epoch=None,
         metrics=None, metadata=None, incremental=False, compression=None):
    """Saves `state_dict` as checkpoint `step` of `root`; a SaveResult.

    Every rank calls it with its own state dict. `epoch`, `metrics` (str
    -> float) and `metadata` (str -> str) go into the manifest;
    incremental=True writes only what changed since the newest checkpoint;
    compression ("zstd", "auto", "off" or a (mode, level) pair) compresses
    its chunks (ckpt.CheckpointManager). Raises ckpt.AlreadyExists if `step` is committed and loads whole (a
    committed step that does not, which a resume skipped, is replaced in
    one atomic commit, with a warning), and on every rank the same error
    when one rank's state cannot be saved (nothing is then committed).
    """
    mgr = manager(root, communicator=communicator)
    # A function, so that an error of a state_dict() on one rank reaches
    # every rank as the save's error.
    return mgr.save(step, lambda: _saved(state_dict), metadata, epoch,
                    metrics, incremental=incremental, compression=compression)


def async_save(state_dict, root, step, *, communicator=None, epoch=None,
               metrics=None, metadata=None, incremental=False,
               stage_in_background=False, compression=None):
    """Starts saving `state_dict` as `step` and returns a handle (wait(),
    or result() as on dcp.async_save's future; done(), wait_staged())
    once its tensors are copied: the caller may
    change them at once. With stage_in_background=True it returns before
    the copy, which then overlaps the next forward and backward pass: call
    handle.wait_staged() before the optimizer step changes the tensors.
    One save of a root is in flight at a time: the next call waits for it.
    A failure is raised once: by wait(), or, when nothing waited for it, by
    the next save (which then saves nothing and says so)."""
    mgr = manager(root, communicator=communicator)
    return mgr.save_async(step, lambda: _saved(state_dict), metadata, epoch,
                          metrics, incremental=incremental,
                          stage_in_background=stage_in_background,
                          compression=compression)


def load(state_dict, root, step=None, *, communicator=None, strict=False,
         transactional=True):
    """Fills `state_dict` in place from `step` of `root` (default: the
    newest committed step that loads whole); the CheckpointInfo of the
    step loaded.

    Tensors (and DTensors' and ShardedTensors' local shards) receive their
    bytes in place, at any world size and split; scalars, strings and bytes
    are replaced in their dicts and lists, and so is a list or tuple of
    plain values whose saved length differs (one holding tensors must have
    the saved length); Stateful objects are filled and then given
    load_state_dict(). Every entry of `state_dict` must be in the
    checkpoint, tensors with their dtype and global shape, and an
    nn.Module's state_dict() must hold every entry the checkpoint has for
    it; with strict=True the checkpoint may hold nothing else either, nor
    a list or tuple of another length. A state that does not fit raises
    ckpt.InvalidArgument naming the root, the step and the entry. Raises
    ckpt.NotFound only when there is nothing to load: `root` does not
    exist, has no committed checkpoint (a folder of DCP's own
    FileSystemWriter is named as such, with how to import it) or no step
    `step`.

    A load either completes at one step or changes nothing: with
    transactional=True (the default) every entry is checked, then read
    into new memory (at its peak, one extra copy of the state loaded, plus
    a buffer of at most 4 MiB, 64 MiB on a device, through which the bytes
    are exchanged; the manager keeps that host memory for its next load,
    until its next save or close(), and none above async_staging_bytes
    where that is set), and only when every rank has read all of it are the
    bytes exchanged into the state's tensors and the load_state_dict()
    calls made. A mismatch, a damaged chunk, a missing
    object, or a load_state_dict() that raises leaves every tensor, scalar,
    Stateful object (a fresh optimizer stays without moments) and the
    `step` value exactly as before (a raising load_state_dict() is undone by
    giving each object called its state from before again).
    transactional=False reads straight into the tensors (no extra memory);
    then a failed load may have written some, and its error names them.

    With step=None, a step that does not load whole (ckpt.DataLoss: a
    damaged chunk or manifest, a missing object) is skipped with a
    RuntimeWarning naming it and why, and the next older one is tried;
    every rank skips it together. Only when none loads is ckpt.DataLoss
    raised, naming every step tried. An explicit `step` never falls back,
    nor does a mismatch (a missing entry, another shape): that is raised at
    once. Ranks agree over ckpt's gloo group of the default process group
    (a manager of another communicator: the library's own choice of step).
    """
    mgr = manager(root, communicator=communicator)
    group = _torch_dist.agreement_group(mgr.world_size)

    def newest_first():
        newest = [info.step for info in reversed(mgr.list())]
        if group is not None:  # every rank tries rank 0's steps
            newest = _torch_dist.broadcast_object(group, newest)
        return newest or [None]  # none: the library's NotFound

    steps = [step]
    resume = step is None and (mgr.world_size == 1 or group is not None)
    where = f"load of the newest step of {mgr.url}"
    if resume:
        try:
            steps = newest_first()
        except _errors.NotFound as e:
            error = _roots.not_a_ckpt_root(e, mgr.url, where)
            raise error from error.__cause__
    skipped = []
    relisted = 0
    while steps:
        s = steps.pop(0)
        outcome, error, staged = _OK, None, None
        try:
            desc = mgr.describe(s, internal=True)
            plan = _LoadPlan(desc, mgr.url, strict)
            target = plan.target(state_dict, ())
            plan.check_entries(target)
            staged = mgr._stage_into(target, desc, strict, transactional,
                                     plan.new_leaves)
        except _errors.DataLoss as e:
            outcome, error = _DAMAGED, e
        except _errors.NotFound as e:
            # Deleted since the listing? (_resume.first_whole)
            outcome, error = (_GONE if resume and s is not None
                              else _FAILED), e
            if outcome == _FAILED:
                error = _roots.not_a_ckpt_root(
                    e, mgr.url, where if s is None else
                    f"load step {s} from {mgr.url}")
        except Exception as e:  # noqa: BLE001 - every rank learns of it
            outcome, error = _FAILED, e
        if group is not None:
            outcome = _torch_dist.agree_max(group, outcome)
        if outcome == _OK:
            plan.commit(staged, transactional, group)
            return staged.info
        if outcome == _GONE and relisted < _resume.MOST_RELISTINGS:
            now = newest_first()
            if s not in now:  # every rank alike: rank 0's listing
                relisted += 1
                steps = now
                continue
        if error is None:
            error = _errors.Aborted(
                f"load step {s} from {mgr.url}: another rank could not load "
                f"it, so no rank changed its state (that rank's error says "
                f"why)")
        if outcome == _DAMAGED and step is None and s is not None:
            skipped.append((s, error))
            _resume.warn_skipped(where, s, error, stacklevel=2)
            continue
        raise error
    raise _resume.all_damaged(where, skipped)


# A rank's outcome of reading a step, the worst of which every rank follows.
_OK, _DAMAGED, _GONE, _FAILED = 0, 1, 2, 3


def latest(root, *, communicator=None, create=False):
    """The newest committed step of `root`, or None.

    A root that does not exist raises ckpt.NotFound naming its path (a
    mistyped path is no new job), unless create=True, which creates it:
    what a job's first run passes, for which None then means "start
    afresh".
    """
    return manager(root, communicator=communicator,
                   create=create).latest()


def manager(root, *, communicator=None, create=False):
    """The ckpt.CheckpointManager that save() and load() use for `root`.

    A manager passed in is returned as it is. For a URL or path, the
    manager of the earlier calls with the same communicator is reused;
    with communicator=None, every rank of an initialized torch.distributed
    job takes part (ckpt.torch_communicator()), else this process alone.
    A root that does not exist is created by the first save, or at once
    with create=True; until then reading it raises ckpt.NotFound.
    """
    if isinstance(root, _manager.CheckpointManager):
        mgr = root
    else:
        mgr = _managed(root, communicator)
    if create:
        mgr._create_root()
    return mgr


def _managed(root, communicator):
    return _torch_dcp._manager_for(os.fspath(root), {}, communicator)


def close(root=None):
    """Closes the managers this module opened (of `root` only, if given):
    each waits for its saves in flight and gives its root's lease back at
    once (CheckpointManager.close()), not when it is collected. Raises,
    once all are closed, the first failure of a save that nothing waited
    for. The next call on a root opens a manager again."""
    with _lock:
        if root is None:
            held = list(_managers.values())
            _managers.clear()
        else:
            held = [h for h in [_managers.pop(_roots.key(os.fspath(root)),
                                              None)] if h]
    first = None
    for mgr, _ in held:
        try:
            mgr.close()
        except _errors.Error as e:
            first = first or e
    del held
    gc.collect()
    if first is not None:
        raise first


# At exit, before ckpt's gloo groups go: the managers this module keeps.
_torch_dist.on_exit(close)


def _is_stateful(value):
    return (not isinstance(value, torch.Tensor)
            and callable(getattr(value, "state_dict", None))
            and callable(getattr(value, "load_state_dict", None)))


def _saved(value, path=()):
    """The state ckpt.CheckpointManager saves for a torch state dict."""
    if _is_stateful(value):
        return _saved(value.state_dict(), path)
    if _is_dtensor(value):
        return _dtensor_shard(value, path)
    if _is_sharded_tensor(value):
        return _sharded_tensor_shard(value, path)
    if isinstance(value, Mapping) and not isinstance(value, _tree.Metadata):
        return {k: _saved(v, path + (k,)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_saved(v, path + (i,)) for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    return value


class _LoadPlan:
    """What load() hands ckpt.CheckpointManager.load_into for a torch
    state dict, and what it does afterwards: Stateful objects get
    load_state_dict(), and values that load_into replaced in the copies of
    the caller's containers go back into the caller's own."""

    def __init__(self, desc, url, strict=False):
        self.stored = {e.name: e for e in desc.entries}
        tree = self.stored.get(_tree.TREE_ENTRY)
        self.tree = None
        if tree is not None and tree.kind == "metadata":
            self.tree = _tree_root(tree.json)
        self.where = f"load step {desc.info.step} from {url}"
        self.strict = strict
        # Run in order once the bytes are in, each given a list to which it
        # adds how to undo what it did.
        self.after = []
        self.new_leaves = set()  # id() of the tensors new_leaf made

    def target(self, value, path):
        if _is_stateful(value):
            return self._stateful(value, path)
        if _is_dtensor(value):
            return _dtensor_shard(value, path)
        if _is_sharded_tensor(value):
            return _sharded_tensor_shard(value, path)
        if isinstance(value, Mapping) and not isinstance(value,
                                                         _tree.Metadata):
            out = {k: self.target(v, path + (k,)) for k, v in value.items()}
            self.after.append(lambda undo: _put_back(value, out, undo))
            return out
        if isinstance(value, (list, tuple)):
            resized = self._resized(value, path)
            if resized is not None:
                return resized
        if isinstance(value, list):
            out = [self.target(v, path + (i,)) for i, v in enumerate(value)]
            self.after.append(lambda undo: _put_back(value, out, undo))
            return out
        if isinstance(value, tuple):
            return tuple(self.target(v, path + (i,))
                         for i, v in enumerate(value))
        return value

    def _stateful(self, obj, path):
        """The stored state of `obj` with its own tensors as targets, and
        new ones for what the checkpoint holds and obj.state_dict() lacks.
        Once loaded, the structure is what obj.load_state_dict() gets."""
        state = obj.state_dict()
        # What undoes a load_state_dict(): the object's state from before
        # (its tensors are the object's own, which hold their old bytes
        # again by then).
        before = obj.state_dict()
        node = _subtree(self.tree, path)
        if node is not None:
            # The names the checkpoint gives the object's own leaves.
            leaves, _ = _tree.flatten(state)
            mine = {_show(path + sub): leaf for _, sub, leaf in leaves}
            stored = set()
            if isinstance(obj, torch.nn.Module):
                # A module takes no entry it lacks: say so before anything
                # is read (an optimizer's lacking ones are its new moments).
                extra = sorted(_leaf_names(node, path) - set(mine))
                if extra:
                    raise _errors.InvalidArgument(
                        f"{self.where}: the checkpoint holds entry "
                        f"{extra[0]!r}, which {_show(path)}'s state_dict() "
                        f"lacks ({len(extra)} such: a different model?); "
                        f"nothing was changed")
            state = _build(node, self, mine, stored)
            if isinstance(obj, torch.optim.Optimizer):
                _shard_new_moments(obj, state, self.new_leaves)
            missing = sorted(set(mine) - stored)
            if missing:
                # InvalidArgument, not NotFound: a caller that starts afresh
                # on NotFound (no checkpoint yet) must not do so when its
                # model changed.
                raise _errors.InvalidArgument(
                    f"{self.where}: the checkpoint has no entry "
                    f"{missing[0]!r} of {_show(path)}'s state_dict() "
                    f"({len(missing)} missing: a different model?); "
                    f"nothing was changed")
        # Else (no tree: a checkpoint from C++) what the object has.
        target = self.target(state, path)

        def load_state(undo):
            # Put back quietly while it has not succeeded: an object that
            # raised may refuse its old state too, having taken none of
            # the new one.
            undo.append(lambda: _quietly(obj.load_state_dict, before))
            obj.load_state_dict(state)
            undo[-1] = lambda: obj.load_state_dict(before)

        self.after.append(load_state)
        return target

    def _resized(self, value, path):
        """The saved list or tuple at `path` built anew, where its length
        differs from the caller's `value` and it holds plain values only
        (as a scalar, it is then replaced); None where the lengths agree
        (or the checkpoint describes no list or tuple there: the entries
        then say what is missing). Tensors load into the state's own, so
        a container of them must have the saved length."""
        node = _subtree(self.tree, path)
        if not isinstance(node, dict) or len(node) != 1:
            return None
        [(kind, children)] = node.items()
        if kind not in ("list", "tuple") or len(children) == len(value):
            return None
        what = (f"{self.where}: entry {_show(path)} is a {kind} of "
                f"{len(children)} items in the checkpoint, the state's has "
                f"{len(value)}")
        if self.strict:
            raise _errors.InvalidArgument(
                f"{what} (a strict load takes the state as it was saved); "
                f"nothing was changed")
        tensors = [n for n in _leaf_names(node, path)
                   if n in self.stored and self.stored[n].kind == "tensor"]
        if tensors or _loads_in_place(value):
            raise _errors.InvalidArgument(
                f"{what}, and it holds tensors or arrays, which load in "
                f"place into the state's own: give the state one of "
                f"{len(children)} items; nothing was changed")
        return _build(node, self, {}, set())

    def check_entries(self, target):
        """Raises before anything is read where `target` holds an entry the
        checkpoint lacks, or (strict) the checkpoint one that it lacks:
        ckpt.InvalidArgument naming the root, not the library's NotFound,
        which a caller takes for "no checkpoint yet"."""
        names = {name for name, _, _ in _tree.flatten(target)[0]}
        missing = sorted(names - set(self.stored))
        if missing:
            raise _errors.InvalidArgument(
                f"{self.where}: the checkpoint has no entry {missing[0]!r} "
                f"of the state ({len(missing)} missing: a different model "
                f"or state?); nothing was changed")
        extra = sorted(set(self.stored) - names - _tree.PACKAGE_ENTRIES)
        if self.strict and extra:
            raise _errors.InvalidArgument(
                f"{self.where}: strict load: the state has no entry "
                f"{extra[0]!r} of the checkpoint ({len(extra)} such); "
                f"nothing was changed")

    def new_leaf(self, name):
        """An empty value for entry `name`, which load_into fills."""
        e = self.stored.get(name)
        if e is None:
            raise _errors.DataLoss(
                f"{self.where}: the state's tree names the entry {name!r}, "
                f"which the checkpoint lacks")
        if e.kind == "tensor":
            dtype = _dtypes.torch_dtype(torch, e.dtype)
            t = torch.empty([int(d) for d in e.shape], dtype=dtype)
            self.new_leaves.add(id(t))
            return t
        return b"" if e.kind == "blob" else None

    def commit(self, staged, transactional, group=None):
        """Hands a load read in whole (ckpt.CheckpointManager._stage_into)
        to the caller's state: the loaded bytes are exchanged with the
        tensors' own, then values are put back and load_state_dict()
        called. If one of those raises, on this rank or (with `group`, the
        job's ranks) on any other, everything is put back as it was and the
        error raised on every rank (with transactional=False the tensors
        are written already and cannot be)."""
        undo = []
        error, swapped = None, False
        try:
            # In the try: a swap that raises (having put back what it
            # exchanged) is agreed on as any failure here, so that the
            # other ranks do not wait for this one.
            staged.swap()
            swapped = True
            staged.replace(undo)
            for step in self.after:
                step(undo)
        except BaseException as e:  # noqa: BLE001 - agreed on, then raised
            error = e
        failed = error is not None
        if group is not None:
            # A rank that kept its load while another put its state back
            # would go on from another step than the rest of the job.
            failed = _torch_dist.agree_max(group, int(failed)) > 0
        if not failed:
            return
        if error is None:
            error = _errors.Aborted(
                f"{self.where}: another rank's load_state_dict() (or putting "
                f"back a value) raised, so "
                + ("no rank changed its state" if transactional else
                   "the load failed on every rank (with transactional=False "
                   "this rank's tensors hold the loaded values)")
                + " (that rank's error says why)")
        if not transactional:
            raise error
        if swapped:
            staged.swap()
        problems = []
        for u in reversed(undo):
            try:
                u()
            except Exception as p:  # noqa: BLE001 - reported below
                problems.append(f"{type(p).__name__}: {p}")
        if problems:
            raise _errors.Aborted(
                f"{self.where}: {type(error).__name__}: {error}; putting the "
                f"state back failed too ({'; '.join(problems)}), so it "
                f"may be partly loaded") from error
        raise error


def _put_back(original, loaded, undo):
    """Puts into the caller's container what load_into replaced (scalars,
    strings, bytes, tuples of them) in its copy `loaded`, adding to `undo`
    how to put the old values back."""
    keys = list(original) if isinstance(original, Mapping) else \
        range(len(original))
    for key in keys:
        old = original[key]
        new = _restored(old, loaded[key])
        if new is not old:
            undo.append(lambda key=key, old=old: original.__setitem__(key,
                                                                       old))
            original[key] = new


def _quietly(f, *args):
    try:
        f(*args)
    except Exception:  # noqa: BLE001, S110 - it raised its own error already
        pass


def _leaf_names(node, path):
    """The entry names of the leaves of tree `node` at `path`."""
    if isinstance(node, str):
        return {node}
    if not isinstance(node, dict) or len(node) != 1:
        return set()
    [(kind, children)] = node.items()
    if kind == "dict":
        children = [child for _, child in children]
    return set().union(*(_leaf_names(c, path) for c in children))


def _restored(mine, loaded):
    """The caller's value `mine` after the load: itself where its memory
    was filled (tensors, sharded tensors, containers put back on their
    own), else the loaded value; a tuple is rebuilt, and a list or tuple
    of another length than the saved one replaced (_LoadPlan._resized)."""
    if isinstance(mine, (list, tuple)) and len(mine) != len(loaded):
        return loaded
    if isinstance(mine, tuple):
        items = [_restored(m, v) for m, v in zip(mine, loaded)]
        if hasattr(mine, "_fields"):  # a namedtuple
            return type(mine)(*items)
        return type(mine)(items)
    if (isinstance(mine, (torch.Tensor, list)) or _is_stateful(mine)
            or _is_dtensor(mine) or _is_sharded_tensor(mine)
            or isinstance(mine, Mapping) and not isinstance(mine,
                                                            _tree.Metadata)
            or _values._buffer.has_buffer(mine)
            and not isinstance(mine, (bytes, bytearray))
            and not _values.is_numpy_scalar(mine)):
        return mine
    return loaded


def _loads_in_place(value):
    """Whether `value` holds anything a load fills in place rather than
    replaces: a tensor, an array, a Stateful object, a RankLocal value."""
    if isinstance(value, Mapping) and not isinstance(value, _tree.Metadata):
        return any(_loads_in_place(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_loads_in_place(v) for v in value)
    return (isinstance(value, (torch.Tensor, _values.RankLocal))
            or _is_stateful(value) or _is_dtensor(value)
            or _is_sharded_tensor(value)
            or _values._buffer.has_buffer(value)
            and not isinstance(value, (bytes, bytearray))
            and not _values.is_numpy_scalar(value))


def _tree_root(text):
    """The root node of a stored tree description, or None if it is not
    one this module can walk (load_into then judges it)."""
    try:
        tree = json.loads(text)
        if tree.get("version") == _tree.TREE_VERSION:
            return tree["root"]
    except (ValueError, AttributeError, KeyError, TypeError):
        pass
    return None


def _subtree(node, path):
    """The tree node at `path`, or None."""
    for key in path:
        if not isinstance(node, dict) or len(node) != 1:
            return None
        [(kind, children)] = node.items()
        if kind == "dict":
            found = [child for k, child in children if k == key]
            if len(found) != 1:
                return None
            node = found[0]
        elif isinstance(key, int) and 0 <= key < len(children):
            node = children[key]
        else:
            return None
    return node


def _build(node, plan, mine, stored):
    """The structure the tree `node` describes, each leaf the caller's own
    (from `mine`, by entry name) or a new one for load_into to fill; adds
    the entry names to `stored`."""
    if isinstance(node, str):
        stored.add(node)
        return mine[node] if node in mine else plan.new_leaf(node)
    if not isinstance(node, dict) or len(node) != 1:
        raise _errors.DataLoss(f"{plan.where}: the state's tree is damaged "
                               f"(a node {node!r:.80})")
    [(kind, children)] = node.items()
    if kind == "dict":
        return {key: _build(child, plan, mine, stored)
                for key, child in children}
    items = [_build(child, plan, mine, stored) for child in children]
    return items if kind == "list" else tuple(items)
