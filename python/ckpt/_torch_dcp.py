"""ckpt as the storage of PyTorch's distributed checkpoint (DCP).

    import torch.distributed.checkpoint as dcp
    import ckpt.torch as ct
    dcp.save(state, storage_writer=ct.StorageWriter("/data/run42"))
    dcp.load(state, storage_reader=ct.StorageReader("/data/run42"))

StorageWriter and StorageReader implement torch.distributed.checkpoint's
StorageWriter and StorageReader, so dcp.save, dcp.async_save and dcp.load
run unchanged, and what they write is a ckpt checkpoint: each dcp.save is
one step of a ckpt root, committed atomically for every rank by one
collective ckpt save, every chunk checksummed and checked on load, readable
by `ckpt ls/show/verify`, recorded in a catalog and subject to retention.

What DCP hands the writer: each tensor item becomes this rank's box of the
global tensor (a ckpt.Shard at the item's offsets; DCP already picked one
rank for a replicated tensor, which then writes it whole), each bytes item
(DCP's torch.save of a non-tensor value) a blob entry, named by the item's
fully qualified name. The reader describes a step to DCP from ckpt's own
manifest (each tensor one chunk of its global shape, each blob a bytes
item), never from a pickle; DCP's load planner alone unpickles the bytes
items it asked for (planner.load_bytes), as it does with any storage, and
only those that torch.load(weights_only=True) reads (the planner itself
would run any code a hostile root's pickle names): others are refused with
ckpt.InvalidArgument naming the entry, on every rank, the state unchanged
(torch.serialization.add_safe_globals allows a trusted root's classes).

checkpoint_id (of dcp.save / dcp.load, for that one call):
  None          the root given to the constructor; a save writes the next
                step (the newest committed step + 1, or 1 in an empty or
                new root), a load reads the newest committed step
  an int N >= 0 step N of the constructor's root
  "ROOT"        another root (URL or path), next/newest step as for None
  "ROOT@N"      step N of ROOT (N: decimal digits after the last "@"; the
                constructor's root is never split, so a root whose name
                ends in "@digits" is given there)
A call without checkpoint_id never inherits an earlier call's.

A load is all or nothing: every rank reads and checks its whole share into
new memory first, the ranks agree, and only then are the planner's tensors
written (at its peak one extra copy of the rank's share); a damaged chunk,
a missing object or a mismatch raises on every rank with the state as it
was. A save is one commit: a rank that cannot build its entries makes
every rank fail with its error, and nothing is committed.

Limits: every rank of the communicator (by default the whole default
process group) takes part in each call, so DCP's process_group is the
default one; a rank writes at most one box of each tensor; the dtypes are
ckpt's; dcp.async_save runs with its default thread executor. DCP's
planner_data is kept beside the entries (ckpt._dcp_planner), no tree of
the state: ckpt.open(root).load() splits DCP's names at their dots.
"""

import io
import math
import os
import re
import threading
import warnings

import torch
import torch.distributed as dist

from ckpt import (_dcp_calls, _dcp_planner, _dtypes, _errors, _manager,
                  _options, _roots, _torch_dist, _tree, _values)

try:
    from torch.distributed.checkpoint import metadata as _md
    from torch.distributed.checkpoint import storage as _storage
    from torch.distributed.checkpoint.planner import (LoadItemType,
                                                      WriteItemType)
    from torch.futures import Future
    _WriterBase, _ReaderBase = _storage.StorageWriter, _storage.StorageReader
    _MISSING = None
except ImportError as _e:  # a PyTorch without DCP: the classes say so
    _WriterBase = _ReaderBase = object
    _MISSING = f"{type(_e).__name__}: {_e}"

__all__ = ["StorageReader", "StorageWriter"]

# "ROOT@STEP": the step is the decimal digits after the last "@".
_ROOT_AT_STEP = re.compile(r"(.*)@([0-9]+)", re.S)

# _roots.key(url) -> (manager, key): one manager per root (however it is
# spelled) and communicator in this process, as ckpt.torch keeps them,
# since a manager holds its root's lease between saves and a second one
# would wait for it.
_managers = {}
_lock = threading.Lock()


def _parse_id(checkpoint_id):
    """(root or None, step or None) named by a checkpoint_id; raises
    ckpt.InvalidArgument for one that names neither."""
    if checkpoint_id is None:
        return None, None
    if isinstance(checkpoint_id, bool):
        raise _errors.InvalidArgument(
            f"checkpoint_id={checkpoint_id!r}: a step (an int >= 0), a root "
            f"(URL or path), \"ROOT@STEP\", or None")
    if isinstance(checkpoint_id, int):
        if checkpoint_id < 0:
            raise _errors.InvalidArgument(
                f"checkpoint_id={checkpoint_id}: a step is >= 0")
        return None, int(checkpoint_id)
    if isinstance(checkpoint_id, (str, os.PathLike)):
        text = os.fspath(checkpoint_id)
        if isinstance(text, str):
            m = _ROOT_AT_STEP.fullmatch(text)
            root, step = (m[1], int(m[2])) if m else (text, None)
            if root:
                return root, step
    raise _errors.InvalidArgument(
        f"checkpoint_id={checkpoint_id!r}: a step (an int >= 0), a root "
        f"(URL or path), \"ROOT@STEP\", or None")


def _show_id(root, step):
    return root if step is None else f"{root}@{step}"


def _default_group():
    """The default process group when torch.distributed is initialized."""
    if dist.is_available() and dist.is_initialized():
        return dist.distributed_c10d._get_default_group()
    return None


def _manager_for(url, options, communicator, reading=False):
    """The cached manager of `url` for these options and communicator
    (None: every rank of an initialized default process group, else this
    process alone); a cached one of other options or another group is
    closed first, so that it gives the root's lease back now, whatever
    still refers to it (an AsyncSave handle of ckpt.torch.async_save
    does): a failure of its saves that nothing raised becomes a warning,
    as for a manager dropped unclosed. For `reading`, any manager of the
    communicator serves (loads take no lease, and no option of a manager
    changes what they read)."""
    key = (communicator if communicator is not None else _default_group(),
           repr(sorted(options.items())))
    with _lock:
        held = _managers.get(_roots.key(url))
        if held is not None and not held[0].closed and \
                held[1][0] is key[0] and (reading or held[1][1] == key[1]):
            return held[0]
        if held is not None:
            del _managers[_roots.key(url)]
            try:
                held[0].close()
            except _errors.Error as e:
                warnings.warn(f"ckpt.torch: closing the manager of {url} "
                              f"for one of other options: {e}",
                              RuntimeWarning, stacklevel=3)
        comm = communicator
        if comm is None and key[0] is not None:
            comm = _torch_dist.torch_communicator()
        mgr = _manager.CheckpointManager(url, communicator=comm, **options)
        _managers[_roots.key(url)] = (mgr, key)
        return mgr


def _close_all():
    """Closes every manager this module keeps (at interpreter exit)."""
    with _lock:
        held = [mgr for mgr, _ in _managers.values()]
        _managers.clear()
    for mgr in held:
        try:
            mgr.close()
        except Exception:  # noqa: BLE001 - the others are closed still
            pass


_torch_dist.on_exit(_close_all)


class _Storage:
    """What the writer and the reader share: the root, the options of its
    manager, and the checkpoint_id of the call in progress."""

    def __init__(self, root, communicator, options, what):
        if _MISSING is not None:
            raise _errors.Unavailable(
                f"{what}: this PyTorch has no torch.distributed.checkpoint "
                f"({_MISSING})")
        if isinstance(root, _manager.CheckpointManager):
            if options or communicator is not None:
                raise _errors.InvalidArgument(
                    f"{what}: a CheckpointManager comes with its own "
                    f"options and communicator; pass a URL to give them")
            self._given, self.url = root, root.url
        else:
            try:
                url = os.fspath(root)
            except TypeError:
                url = None
            if not isinstance(url, str) or not url:
                raise _errors.InvalidArgument(
                    f"{what}: the root is a URL or path (file://, s3://, "
                    f"mem://) or a ckpt.CheckpointManager, not {root!r}")
            self._given, self.url = None, url
            _options.check_names(f"{what}()", options, ("communicator",))
        self._communicator, self._options = communicator, dict(options)
        # The call in progress, on its own thread: DCP makes one save's or
        # load's calls on one thread, and each dcp.async_save runs on a
        # thread of its own, several at a time on one writer.
        self._here = _Call()
        self._last_call, self._roots_used = (self.url, None), {self.url}

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_here"]  # a thread's call in progress stays there
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._here = _Call()

    @property
    def checkpoint_id(self):
        """The root (and "@STEP") of the call set up or about to be."""
        root, step = self._here.pending
        if (root is None and step is None) or \
                _dcp_calls.named_an_id() is False:
            root, step = self._here.call or self._last_call
        return _show_id(root or self.url, step)

    def reset(self, checkpoint_id=None):
        # What the next call names; that call takes it (_take), so that a
        # later call without one has none.
        self._here.pending = _parse_id(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        try:
            _parse_id(checkpoint_id)
        except _errors.InvalidArgument:
            return False
        return checkpoint_id is not None

    def _take(self):
        """(root URL, step or None) of the call starting now."""
        here = self._here
        root, step = here.pending
        here.pending = (None, None)
        if _dcp_calls.named_an_id() is False:
            # Left by a call that failed before it took it (a Stateful's
            # state_dict() that raised): not this call's.
            root, step = None, None
        here.call = self._last_call = (root or self.url, step)
        self._roots_used.add(here.call[0])
        return here.call

    def _open(self, url, reading=False):
        if self._given is not None and url == self.url:
            return self._given
        return _manager_for(url, self._options, self._communicator,
                            reading)

    def close(self):
        """Closes the managers of this object's roots, as
        ckpt.torch.close(root) does: a save in flight ends first, and each
        root's lease goes back at once, whatever still refers to the
        manager (a failed save's traceback, kept by its future, does). The
        next call on a root opens it again."""
        self._here.mgr = self._here.desc = None
        with _lock:
            held = [_managers.pop(_roots.key(url), None)
                    for url in set(self._roots_used)]
        first = None
        for mgr, _ in filter(None, held):
            try:
                mgr.close()
            except _errors.Error as e:
                first = first or e
        if first is not None:
            raise first


class _Call(threading.local):
    """A thread's dcp.save or dcp.load in progress: the checkpoint_id that
    reset() set, the (root, step) it took, and the manager (and, loading,
    the step's description) between DCP's calls."""
    pending = (None, None)
    call = None
    mgr = desc = None


class StorageWriter(_Storage, _WriterBase):
    """A torch.distributed.checkpoint StorageWriter that saves each
    dcp.save (or dcp.async_save) as one ckpt checkpoint step of `root`.

    `root` is a URL or path (file://, s3://, mem://: what ckpt.open takes),
    or a ckpt.CheckpointManager. `options` are CheckpointManager options
    (keep_last=3, catalog=True, job_id=..., chunk_size, ...): the root is
    opened once per process with them and kept with its lease.
    `communicator`: default, every rank of the initialized default process
    group (ckpt.torch_communicator()), else this process alone; every rank
    of it calls dcp.save. See the module's docstring for checkpoint_id.
    After a save, `last_step` is the step it committed (on every rank).
    """

    def __init__(self, root, *, communicator=None, **options):
        super().__init__(root, communicator, options,
                         "ckpt.torch.StorageWriter")
        self.last_step = None

    def storage_meta(self):
        return _md.StorageMeta(checkpoint_id=self.checkpoint_id)

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        # Opening here, inside DCP's planning step, lets DCP report a root
        # that cannot be opened on every rank before any rank writes.
        _dcp_calls.refuse_a_background_process(self.url)
        url, _ = self._take()
        self._here.mgr = self._open(url)

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def write_data(self, plan, planner):
        here = self._here
        mgr = here.mgr
        if mgr is None:
            raise _errors.FailedPrecondition(
                "ckpt.torch.StorageWriter.write_data: set_up_storage_writer "
                "was not called (save through torch.distributed.checkpoint)")
        # The manager stays in the module's cache, not in this object,
        # once the call is over: close() lets go of it.
        here.mgr = None
        step = _agreed_step(mgr, here.call[1])
        # What is wrong with this rank's items goes to the library as the
        # save's error, so that every rank fails with it together.
        try:
            entries, results = _entries(plan, planner)
            entries += _dcp_planner.saved_entries(mgr.rank, plan, planner)
        except Exception as e:  # noqa: BLE001 - reported to every rank
            if mgr.world_size == 1:
                raise
            entries, results = e, []
        mgr._m.save(step, entries, -1, {}, {}, False, {})
        self.last_step = step
        done = Future()
        done.set_result([_storage.WriteResult(index=r[0], size_in_bytes=r[1],
                                              storage_data=step)
                         for r in results])
        return done

    def finish(self, metadata, results):
        # The collective save in write_data has committed the step on every
        # rank before any returned; what is left is to check that every
        # rank says the same step.
        steps = {r.storage_data for rank in results for r in rank}
        if len(steps) > 1:
            raise _errors.Aborted(
                f"ckpt.torch.StorageWriter: the ranks report the steps "
                f"{sorted(steps)} for one save")


def _agreed_step(mgr, step):
    """The step a save writes: `step`, or the newest committed + 1 (1 in an
    empty root) as rank 0 finds it, on every rank."""
    if step is not None:
        return step
    group = _torch_dist.agreement_group(mgr.world_size)
    step, error = None, None
    if group is None or mgr.rank == 0:
        try:
            try:
                newest = mgr.latest()
            except _errors.NotFound:
                newest = None  # a root the save creates
            step = 1 if newest is None else newest + 1
        except Exception as e:  # noqa: BLE001 - every rank learns of it
            error = e
    if group is not None:
        why = None if error is None else f"{type(error).__name__}: {error}"
        step, why = _torch_dist.broadcast_object(group, (step, why))
        if why is not None and error is None:
            error = _errors.Aborted(
                f"save into {mgr.url}: rank 0 could not find the next step "
                f"({why}); nothing was written")
    if error is not None:
        raise error
    return step


def _entries(plan, planner):
    """The library's entries of this rank's write items, and [(index,
    bytes)] of each item for its WriteResult."""
    entries, results, names = [], [], set()
    for item in plan.items:
        name = item.index.fqn
        if name in names:
            raise _errors.InvalidArgument(
                f"entry {name!r}: this rank writes more than one chunk of it; "
                f"ckpt saves one box of a tensor per rank")
        names.add(name)
        data = planner.resolve_data(item)
        if item.type == WriteItemType.BYTE_IO:
            value = bytes(data.getvalue() if hasattr(data, "getvalue")
                          else data.read())
            size = len(value)
            _check_loadable(name, value)
        else:
            value, size = _tensor_value(name, item, data)
        results.append((item.index, size))
        if _values.holds_nothing(value):
            continue  # an empty box: this rank holds none of the tensor
        inner, place = _values.placement(name, value)
        entries.append((name, *_values.encode(name, inner), place))
    return entries, results


def _check_loadable(name, value):
    """Warns at the save of a bytes item that _Reads.check_bytes will
    refuse unless its classes are allowlisted: not first at the resume."""
    try:
        torch.load(io.BytesIO(value), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any refusal
        warnings.warn(
            f"ckpt.torch.StorageWriter: entry {name!r}: torch.load("
            f"weights_only=True) does not read it back ({_why_refused(e)}), "
            f"so dcp.load through ckpt.torch.StorageReader will refuse it "
            f"(DCP's load planner unpickles with weights_only=False, and a "
            f"pickle could run code) unless the process that loads it "
            f"allowlists its classes with torch.serialization."
            f"add_safe_globals; a tensor, number, str, bytes, None, dict, "
            f"list or tuple needs none", RuntimeWarning, stacklevel=2)


def _tensor_value(name, item, tensor):
    """The state value of a tensor item: this rank's box of the global
    tensor (a 0-d tensor whole), and its size in bytes."""
    if not isinstance(tensor, torch.Tensor):
        raise _errors.InvalidArgument(
            f"entry {name!r}: the planner resolved a tensor item to a "
            f"{type(tensor).__name__}")
    tensor = tensor.detach()
    data = item.tensor_data
    sizes = [int(s) for s in data.chunk.sizes]
    if list(tensor.shape) != sizes:
        raise _errors.InvalidArgument(
            f"entry {name!r}: the planner's tensor has shape "
            f"{list(tensor.shape)}, its write item says {sizes}")
    size = tensor.numel() * tensor.element_size()
    if tensor.dim() == 0:
        return tensor, size
    return _values.Shard(tensor, data.chunk.offsets, data.size), size


class StorageReader(_Storage, _ReaderBase):
    """A torch.distributed.checkpoint StorageReader that loads a step of a
    ckpt root (what StorageWriter saved: see the module's docstring for
    checkpoint_id) into dcp.load's state, at any world size and split.

    `root` is a URL or path, or a ckpt.CheckpointManager; `communicator` as
    for StorageWriter. Every rank reads only the boxes it loads, checks
    every chunk, and writes nothing into the state until every rank has
    read its share whole.
    """

    def __init__(self, root, *, communicator=None):
        super().__init__(root, communicator, {}, "ckpt.torch.StorageReader")
        self.step = None

    def read_metadata(self):
        """The DCP Metadata of the step this load reads, from ckpt's
        manifest: each tensor entry one chunk of its global shape, each
        blob a bytes item."""
        url, step = self._take()
        mgr = self._open(url, reading=True)
        what = (f"dcp.load from {mgr.url}" if step is None else
                f"dcp.load of step {step} from {mgr.url}")
        try:
            if step is None:
                step = mgr.latest()
                if step is None:
                    raise _errors.NotFound(
                        f"{what}: the root has no committed checkpoint")
            desc = mgr.describe(step, internal=True)
        except _errors.NotFound as e:
            error = _roots.not_a_ckpt_root(e, mgr.url, what)
            if error is e:
                raise
            raise error from error.__cause__
        self._here.mgr, self._here.desc = mgr, desc
        self.step = desc.info.step
        return _metadata(desc, _show_id(url, desc.info.step))

    def set_up_storage_reader(self, metadata, is_coordinator, *args,
                              **kwargs):
        pass

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        here = self._here
        mgr, desc = here.mgr, here.desc
        if mgr is None:
            raise _errors.FailedPrecondition(
                "ckpt.torch.StorageReader.read_data: read_metadata was not "
                "called (load through torch.distributed.checkpoint)")
        here.mgr = here.desc = None  # as StorageWriter.write_data
        step = desc.info.step
        where = f"dcp.load of step {step} from {mgr.url}"
        reads, error = None, None
        try:
            reads = _Reads(plan, planner, desc, where)
        except Exception as e:  # noqa: BLE001 - every rank learns of it
            error = e
        _agree(mgr, step, error, where)
        # Every rank reads its boxes into new memory; the library checks
        # every chunk and fails every rank if one fails.
        staged = mgr._stage_into(reads.state, desc, False, True, reads.own)
        staged.commit()  # the blobs, into reads.state
        try:
            reads.check_bytes()
        except Exception as e:  # noqa: BLE001 - every rank learns of it
            error = e
        _agree(mgr, step, error, where)
        reads.apply()
        done = Future()
        done.set_result(None)
        return done


def _metadata(desc, checkpoint_id):
    """DCP's Metadata of a ckpt checkpoint description."""
    out = {}
    for e in desc.entries:
        if e.owner != -1 or e.name in _tree.PACKAGE_ENTRIES:
            continue  # rank-local values and ckpt's own entries are not DCP's
        dtype = _torch_dtype(e)
        if e.kind == "tensor" and dtype is not None:
            shape = torch.Size(int(d) for d in e.shape)
            out[e.name] = _md.TensorStorageMetadata(
                properties=_md.TensorProperties(dtype=dtype),
                size=shape,
                chunks=[_md.ChunkStorageMetadata(
                    offsets=torch.Size([0] * len(shape)), sizes=shape)])
        elif e.kind == "blob":
            out[e.name] = _md.BytesStorageMetadata()
    return _md.Metadata(state_dict_metadata=out,
                        planner_data=_dcp_planner.planner_data(desc, out),
                        storage_meta=_md.StorageMeta(
                            checkpoint_id=checkpoint_id))


def _torch_dtype(entry):
    """The torch dtype of a tensor entry; None for one that StorageWriter
    never writes (an 8-bit float or a wide unsigned integer a C++ program
    saved), which DCP is not told of."""
    dtype = _dtypes.torch_dtype(torch, entry.dtype)
    return None if dtype is torch.uint8 and entry.dtype != "U8" else dtype


def _agree(mgr, step, error, where):
    """Raises on every rank when any rank failed to prepare its reads or
    the ranks read different steps (a save committed between their
    read_metadata calls), before any rank reads."""
    group = _torch_dist.agreement_group(mgr.world_size)
    if group is not None:
        everyone = [None] * dist.get_world_size(group)
        dist.all_gather_object(everyone, (step, error is not None),
                               group=group)
        if error is None and any(failed for _, failed in everyone):
            bad = [r for r, (_, failed) in enumerate(everyone) if failed]
            error = _errors.Aborted(
                f"{where}: rank {bad[0]} could not prepare its reads (its "
                f"error says why); no rank changed its state")
        steps = sorted({s for s, _ in everyone})
        if error is None and len(steps) > 1:
            error = _errors.Aborted(
                f"{where}: the ranks found different newest steps {steps} "
                f"(a save committed while they looked); nothing was "
                f"changed: load again, or name the step in checkpoint_id")
    if error is not None:
        raise error


def _why_refused(error):
    """The line of PyTorch's weights_only refusal that names what it
    refused (its first is the same paragraph for every refusal)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:
        if "GLOBAL" in line or "Unsupported" in line:
            return line
    return lines[0] if lines else type(error).__name__


class _Reads:
    """One rank's reads: for each tensor, the smallest box of the global
    tensor that holds every region the plan asks of it, read into new
    memory; the planner's targets, resolved before anything is read."""

    def __init__(self, plan, planner, desc, where):
        stored = {e.name: e for e in desc.entries if e.owner == -1}
        self.planner, self.where = planner, where
        self.state, self.own = {}, set()
        self.tensors, self.bytes = [], []  # (item, target, global offsets)
        boxes = {}  # fqn -> [lo, hi]
        for item in plan.items:
            name = item.storage_index.fqn
            e = stored.get(name)
            want = "blob" if item.type == LoadItemType.BYTE_IO else "tensor"
            if e is None or e.kind != want:
                # Not NotFound, which reads as "no checkpoint yet": the
                # state does not match the checkpoint.
                raise _errors.InvalidArgument(
                    f"{where}: the checkpoint has no {want} entry {name!r}")
            if want == "blob":
                self.state[name] = b""
                self.bytes.append(item)
                continue
            base = item.storage_index.offset or [0] * len(e.shape)
            lo = [int(b) + int(o) for b, o in zip(base, item.storage_offsets)]
            lengths = [int(n) for n in item.lengths]
            hi = [a + n for a, n in zip(lo, lengths)]
            if len(lo) != len(e.shape) or any(
                    a < 0 or b > d for a, b, d in zip(lo, hi, e.shape)):
                raise _errors.InvalidArgument(
                    f"{where}: the plan reads {lo}..{hi} of entry {name!r}, "
                    f"of shape {e.shape}")
            target = planner.resolve_tensor(item).detach()
            if list(target.shape) != lengths:
                raise _errors.InvalidArgument(
                    f"{where}: entry {name!r}: the planner's target has shape "
                    f"{list(target.shape)}, the read item {lengths}")
            self.tensors.append((item, target, lo))
            if math.prod(lengths) == 0:
                continue
            box = boxes.setdefault(name, [lo, hi])
            box[0] = [min(a, b) for a, b in zip(box[0], lo)]
            box[1] = [max(a, b) for a, b in zip(box[1], hi)]
        self.boxes = {}
        for name, (lo, hi) in boxes.items():
            e = stored[name]
            shape = [int(d) for d in e.shape]
            temp = torch.empty([b - a for a, b in zip(lo, hi)],
                               dtype=_torch_dtype(e))
            self.own.add(id(temp))
            self.boxes[name] = (temp, lo)
            whole = lo == [0] * len(shape) and hi == shape
            self.state[name] = temp if whole else _values.Shard(temp, lo,
                                                                shape)

    def check_bytes(self):
        """Each bytes item read as torch.load(weights_only=True) reads it,
        before any is handed to the planner: DCP's own planner unpickles
        them with weights_only=False, which runs whatever a pickle names,
        and a root may come from anyone."""
        for item in self.bytes:
            name = item.storage_index.fqn
            try:
                torch.load(io.BytesIO(self.state[name]), weights_only=True)
            except Exception as e:  # noqa: BLE001 - any refusal
                raise _errors.InvalidArgument(
                    f"{self.where}: entry {name!r}: torch.load("
                    f"weights_only=True) refuses it ({_why_refused(e)}"
                    f"), and ckpt hands DCP's load planner, which unpickles "
                    f"with weights_only=False, only bytes it accepts: a "
                    f"pickle could run code. If this root is yours, allow "
                    f"the classes it names with "
                    f"torch.serialization.add_safe_globals") from None

    def apply(self):
        """Copies the loaded regions into the planner's targets and hands
        it the bytes items (which DCP's planner unpickles itself, once
        check_bytes has read them as weights_only=True does)."""
        with torch.no_grad():
            for item, target, lo in self.tensors:
                name = item.storage_index.fqn
                if name in self.boxes:
                    temp, base = self.boxes[name]
                    src = temp
                    for d, n in enumerate(item.lengths):
                        src = src.narrow(d, lo[d] - base[d], int(n))
                    target.copy_(src)
                self.planner.commit_tensor(item, target)
        for item in self.bytes:
            blob = self.state[item.storage_index.fqn]
            self.planner.load_bytes(item, io.BytesIO(blob))
