"""ckpt.lightning: Lightning's checkpoints saved through ckpt.

    import ckpt.lightning
    from lightning.pytorch import Trainer
    from lightning.pytorch.callbacks import ModelCheckpoint

    trainer = Trainer(plugins=[ckpt.lightning.CheckpointIO()],
                      callbacks=[ModelCheckpoint(dirpath="ckpts",
                                                 save_last=True)])
    trainer.fit(model, ckpt_path="last")

How Lightning's files map onto ckpt (docs/pytorch.md, "Lightning"):

- Each file Lightning saves (DIR/epoch=3-step=40.ckpt, DIR/last.ckpt) is
  one committed ckpt step of a root: by default DIR itself, so that the
  step directories lie beside the files (`ckpt ls DIR`); CheckpointIO(root=
  URL) puts every step in that root instead. The step is the checkpoint's
  global_step, or the root's newest step + 1 when that is larger (the
  second file saved at one global step: last.ckpt beside epoch=...ckpt).
  A second file at the global step that this process saved last is an
  incremental save: the chunks it shares with the first are referenced,
  not written again.
- The file at Lightning's path is a pointer: a few lines of JSON naming the
  root and the step (never a pickle), written after the step commits and
  put in place by a rename, so that Lightning's own checks (does the file
  exist, which last*.ckpt is newest) keep working and a crash leaves the
  previous pointer whole. The step's manifest names its file in turn
  (metadata "lightning_file", and "global_step").
- A step is deleted once its file no longer names it: Lightning removed
  the file (save_top_k) or saved another step over it (last.ckpt); one
  that a kept step depends on (an incremental save) waits for that step.
- The dict loads back exactly (ckpt._lightning_state): what ckpt holds as
  it is stays so, containers and types it does not are recorded, and any
  other value is torch.save bytes that torch.load(weights_only=True) must
  read back when it is saved: an object it would refuse (a class of yours
  in hyper_parameters) fails the save with an error naming its key,
  unless its class is allowlisted (torch.serialization.add_safe_globals).
- CheckpointIO(asynchronous=True): save_checkpoint copies the tensors to
  host memory and returns; one thread writes the saves (and the removals
  queued after them) in order. A failure is raised by the next call, and
  teardown() (which Lightning calls at the end of fit) waits for them all.

Lightning must be importable: ckpt's core never imports this module.
"""

import concurrent.futures
import json
import os
import threading
import uuid
import warnings
import weakref

import ckpt
from ckpt import _errors, _lightning_state, _options
from ckpt._lightning_state import CPU

try:
    from lightning.fabric.plugins.io.checkpoint_io import (
        CheckpointIO as _LightningCheckpointIO)
    from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
    from lightning.fabric.utilities.cloud_io import get_filesystem
except ImportError:
    try:  # the standalone packages: pytorch_lightning and lightning_fabric
        from lightning_fabric.plugins.io.checkpoint_io import (
            CheckpointIO as _LightningCheckpointIO)
        from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
        from lightning_fabric.utilities.cloud_io import get_filesystem
    except ImportError as e:
        raise ImportError(
            f"ckpt.lightning needs Lightning (pip install lightning): {e}"
        ) from None

__all__ = ["CheckpointIO", "load"]

POINTER_FORMAT = "ckpt.lightning pointer"
POINTER_VERSION = 1
_MAX_POINTER_BYTES = 1 << 16

# Manager options that would delete steps behind the pointers' backs, or
# split a save that Lightning makes on one rank.
_REFUSED = ("keep_last", "keep_every_n_steps", "keep_every_seconds",
            "keep_best", "best_metric", "min_seconds_between_saves",
            "communicator")


class CheckpointIO(_LightningCheckpointIO):
    """A Lightning CheckpointIO that saves each checkpoint as a ckpt step.

    root: None (default) keeps each file's steps in the file's own
    directory; a URL or path (file://, s3://, mem://) keeps every step in
    that root, whatever directory the files are in. asynchronous=True
    returns from saves once the tensors are copied, at most `max_pending`
    saves waiting at a time. Other keyword arguments go to ckpt.open for
    the roots this opens (chunk_size, lease_seconds, catalog, ...); the
    retention options are refused, since Lightning's ModelCheckpoint
    decides what is kept.
    """

    def __init__(self, root=None, *, asynchronous=False, max_pending=2,
                 **options):
        _options.check_names("ckpt.lightning.CheckpointIO()", options,
                               ("asynchronous", "max_pending"))
        refused = sorted(set(options) & set(_REFUSED))
        if refused:
            raise _errors.InvalidArgument(
                f"ckpt.lightning.CheckpointIO({refused[0]}=...): Lightning's "
                f"ModelCheckpoint decides which checkpoints are kept "
                f"(save_top_k) and rank 0 saves them; ckpt deletes a step "
                f"when Lightning removes its file")
        if int(max_pending) < 1:
            raise _errors.InvalidArgument(
                f"ckpt.lightning.CheckpointIO(max_pending={max_pending}): at "
                f"least 1")
        self._root = None if root is None else _normal(os.fspath(root))
        self._asynchronous = bool(asynchronous)
        self._max_pending = int(max_pending)
        self._options = options
        self._start()

    def _start(self):
        self._managers = {}
        self._lock = threading.RLock()
        self._executor = None
        self._futures = []
        self._errors = []
        self._previous = {}  # root -> (step, global_step) saved last here
        self._swept = set()

    # Threads, locks and open managers stay with the process (ddp_spawn
    # pickles the strategy and its plug-ins).
    def __getstate__(self):
        return {"root": self._root, "asynchronous": self._asynchronous,
                "max_pending": self._max_pending, "options": self._options}

    def __setstate__(self, state):
        self._root = state["root"]
        self._asynchronous = state["asynchronous"]
        self._max_pending = state["max_pending"]
        self._options = state["options"]
        self._start()

    def __repr__(self):
        return (f"ckpt.lightning.CheckpointIO(root={self._root!r}, "
                f"asynchronous={self._asynchronous})")

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        """Saves Lightning's `checkpoint` dict as a step and writes the
        pointer at `path` once it has committed (see the module's doc)."""
        if storage_options is not None:
            raise TypeError(
                f"ckpt.lightning.CheckpointIO saves no storage_options "
                f"(got {storage_options!r}): pass ckpt.open's options to "
                f"CheckpointIO(...)")
        path = _fspath(path)
        self._raise_failure()
        if not isinstance(checkpoint, dict):
            raise _errors.InvalidArgument(
                f"save {path}: a checkpoint is a dict, not a "
                f"{type(checkpoint).__name__}")
        state = _lightning_state.Encoder(self._asynchronous,
                                         path).state(checkpoint)
        facts = (_count(checkpoint.get("global_step")),
                 _count(checkpoint.get("epoch")))
        if not self._asynchronous:
            self._save(state, path, *facts)
            return
        self._submit(self._save, state, path, *facts)

    def load_checkpoint(self, path, map_location=CPU, weights_only=None):
        """The dict saved at `path` (a pointer: its step; any other file:
        torch.load, as Lightning's TorchCheckpointIO). Tensors are torch
        tensors on the CPU by default; map_location moves them as
        torch.load would (a device, a str, a dict of saved location to
        location, or a function of (storage, location)). weights_only=False
        lets the values kept as torch.save bytes load unrestricted."""
        path = _fspath(path)
        self.wait()
        pointer = _read_pointer(path)
        if pointer is None:
            if not get_filesystem(path).exists(path):
                raise FileNotFoundError(f"Checkpoint file not found: {path}")
            where = (lambda storage, loc: storage) if map_location is CPU \
                else map_location
            return TorchCheckpointIO().load_checkpoint(
                path, map_location=where, weights_only=weights_only)
        root, step = _pointed_root(pointer, path), pointer["step"]
        with self._lock:
            # NumPy arrays, which decode() makes torch tensors (as_torch
            # would warn about the uint arrays that it leaves NumPy's).
            try:
                state = self._manager(root).load(
                    step, as_torch=_lightning_state.np is None)
            except _errors.NotFound as e:
                # A pointer copied or moved away from its root (its root is
                # kept relative to it) names a step that is not there.
                beside = " (the folder it lies in)" \
                    if pointer["root"] == "." else ""
                raise _errors.NotFound(
                    f"load {path}: this file is a ckpt pointer to step "
                    f"{step} of {root}{beside}, which does not hold that "
                    f"step ({e}); a pointer holds no weights, so a copy of "
                    f"it away from its root finds none (ckpt export ROOT "
                    f"--step {step} FILE.safetensors copies them out)") \
                    from None
        return _lightning_state.decode(
            state, map_location, weights_only,
            f"load {path} (step {step} of {root})")

    def remove_checkpoint(self, path):
        """Removes the file at `path`; the step it named is deleted once no
        file names it."""
        path = _fspath(path)
        self._raise_failure()
        if self._asynchronous:
            self._submit(self._remove, path)
        else:
            self._remove(path)

    def wait(self):
        """Waits for every queued save and removal; raises the first
        failure not raised yet."""
        for future in list(self._futures):
            concurrent.futures.wait([future])
        self._raise_failure()

    def teardown(self):
        """Waits for the queued saves, then closes the roots (giving their
        leases back); raises the first failure not raised yet."""
        try:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None
            self._collect()
        finally:
            with self._lock:
                managers, self._managers = self._managers, {}
                self._swept.clear()
            for root, mgr in managers.items():
                _let_go(self, root, mgr)
        self._raise_failure()

    # The work, on the caller's thread or the writer's.

    def _save(self, state, path, global_step, epoch):
        root, name, pointer_root = self._place(path)
        with self._lock:
            mgr = self._writer(root)
            try:
                newest = mgr.latest()
            except _errors.NotFound:  # the first save makes the root
                newest = None
            step = max(global_step or 0, -1 if newest is None else newest + 1)
            previous = self._previous.get(root)
            incremental = (global_step is not None and previous is not None
                           and previous == (newest, global_step))
            metadata = {"lightning_file": name}
            if global_step is not None:
                metadata["global_step"] = str(global_step)
            mgr.save(step, state, metadata=metadata, epoch=epoch,
                     incremental=incremental)
            self._previous[root] = (step, global_step)
            replaced = _pointer_or_none(path)
            _write_pointer(path, {
                "format": POINTER_FORMAT, "version": POINTER_VERSION,
                "root": pointer_root, "step": step,
                "global_step": global_step, "epoch": epoch})
            if replaced is not None:
                self._sweep(_pointed_root(replaced, path))

    def _remove(self, path):
        fs = get_filesystem(path)
        if not fs.exists(path):
            return
        pointer = _pointer_or_none(path)
        fs.rm(path, recursive=True)
        if pointer is not None:
            with self._lock:
                self._sweep(_pointed_root(pointer, path))

    def _place(self, path):
        """(root URL, the name the step records for its file, the root as
        the pointer names it: "." for the file's own directory)."""
        directory, base = _split(path)
        root = self._root or directory
        if root == directory:
            return root, base, "."
        return root, _normal(path), root

    def _manager(self, root):
        mgr = self._managers.get(root)
        if mgr is None or mgr.closed:
            mgr = self._managers[root] = _manager_of(self, root)
        return mgr

    def _writer(self, root):
        mgr = self._manager(root)
        if root not in self._swept:  # steps a killed run left unnamed
            self._swept.add(root)
            self._sweep(root)
        return mgr

    def _sweep(self, root):
        """Deletes the steps of `root` that this plug-in saved and whose
        file no longer names them, newest first, skipping those a kept step
        depends on."""
        # A failure here costs storage, not a checkpoint: it is a warning,
        # and the next sweep tries again.
        try:
            mgr = self._manager(root)
            infos = mgr.list()
        except _errors.NotFound:
            return
        except _errors.Error as e:
            warnings.warn(f"ckpt.lightning: the steps of {root} that no file "
                          f"names any more were not deleted: {e}",
                          RuntimeWarning, stacklevel=2)
            return
        needed = set()
        for info in reversed(infos):
            if info.step not in needed and _released(root, info):
                try:
                    mgr.delete(info.step)
                    continue
                except _errors.Error as e:
                    warnings.warn(
                        f"ckpt.lightning: step {info.step} of {root}, which "
                        f"no file names any more, was not deleted: {e}",
                        RuntimeWarning, stacklevel=2)
            needed.update(info.depends_on or ())

    # The writer thread of asynchronous=True.

    def _submit(self, work, *args):
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="ckpt-lightning")
        self._futures.append(self._executor.submit(work, *args))
        while len([f for f in self._futures if not f.done()]) > \
                self._max_pending:
            concurrent.futures.wait([f for f in self._futures
                                     if not f.done()][:1])
        self._collect()

    def _collect(self):
        for future in [f for f in self._futures if f.done()]:
            self._futures.remove(future)
            if future.exception() is not None:
                self._errors.append(future.exception())

    def _raise_failure(self):
        self._collect()
        if self._errors:
            error, self._errors = self._errors[0], []
            raise error


# root -> (manager, its options, the plug-ins using it): the plug-ins of a
# process share one manager of a root. A manager holds the root's lease
# between saves, so that a second one waited lease_wait_seconds and failed
# where a plug-in was not torn down when another saved into its root: a
# Fabric's (Fabric never calls teardown()), a Trainer's saving after fit,
# a notebook's cell run again with a new Trainer.
_shared = {}
_shared_lock = threading.Lock()


def _manager_of(plugin, root):
    """The manager of `root` for `plugin`: the shared one, or, where a
    plug-in in use holds one of other options, one of its own."""
    options = plugin._options
    key = repr(sorted(options.items()))
    with _shared_lock:
        held = _shared.get(root)
        if held is not None and held[1] != key and len(held[2]) > 0:
            return ckpt.open(root, **options)
        if held is not None and (held[0].closed or held[1] != key):
            del _shared[root]
            _close(held[0])  # nobody uses it: its lease goes now
            held = None
        if held is None:
            held = _shared[root] = (ckpt.open(root, **options), key,
                                    weakref.WeakSet())
        held[2].add(plugin)
        return held[0]


def _let_go(plugin, root, mgr):
    """`plugin` is done with `mgr`: closed once no plug-in uses it (its
    lease goes with it)."""
    with _shared_lock:
        held = _shared.get(root)
        if held is not None and held[0] is mgr:
            held[2].discard(plugin)
            if len(held[2]) > 0:
                return
            del _shared[root]
    _close(mgr)


def load(path, map_location=CPU, weights_only=None, **options):
    """The checkpoint dict at `path`, as CheckpointIO(**options) loads it:
    for a model's weights outside a Trainer, e.g.
    model.load_state_dict(ckpt.lightning.load(path)["state_dict"])."""
    plugin = CheckpointIO(**options)
    try:
        return plugin.load_checkpoint(path, map_location, weights_only)
    finally:
        plugin.teardown()


# Pointers: small JSON files at Lightning's paths.

def _write_pointer(path, pointer):
    data = (json.dumps(pointer, indent=1) + "\n").encode()
    if not _is_local(path):
        fs = get_filesystem(path)
        fs.makedirs(_split(path)[0], exist_ok=True)
        fs.pipe_file(path, data)  # one PUT: whole or absent
        return
    path = _local_path(path)
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    # Not *.ckpt, so that Lightning's listings never see a half-written one.
    temporary = f"{path}.tmp-{uuid.uuid4().hex[:16]}"
    try:
        with open(temporary, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_pointer(path):
    """The pointer at `path`, or None when it is missing or another file
    (a torch.save checkpoint). A file that says it is a pointer and is not
    a whole one is ckpt.DataLoss; a newer one, ckpt.FailedPrecondition."""
    try:
        if _is_local(path):
            with open(_local_path(path), "rb") as f:
                data = f.read(_MAX_POINTER_BYTES + 1)
        else:
            with get_filesystem(path).open(path, "rb") as f:
                data = f.read(_MAX_POINTER_BYTES + 1)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    if not data.lstrip().startswith(b"{") or len(data) > _MAX_POINTER_BYTES:
        return None
    try:
        pointer = json.loads(data)
    except ValueError:
        return None
    if not isinstance(pointer, dict) or \
            pointer.get("format") != POINTER_FORMAT:
        return None
    version, step, root = (pointer.get(k) for k in ("version", "step",
                                                     "root"))
    if type(version) is not int or version > POINTER_VERSION:
        raise _errors.FailedPrecondition(
            f"{path}: a ckpt.lightning pointer of version {version!r}; this "
            f"ckpt.lightning reads version {POINTER_VERSION}")
    if type(step) is not int or step < 0 or not isinstance(root, str) or \
            not root:
        raise _errors.DataLoss(f"{path}: a ckpt.lightning pointer without a "
                               f"step (an int) or a root (a URL or path)")
    return pointer


def _pointer_or_none(path):
    """_read_pointer, with None for a pointer it cannot read."""
    try:
        return _read_pointer(path)
    except _errors.Error:
        return None


def _pointed_root(pointer, path):
    """The root a pointer at `path` names ("." is the pointer's directory)."""
    root = pointer["root"]
    return _split(path)[0] if root == "." else _normal(root)


def _released(root, info):
    """Whether step `info` of `root` was saved by this module and its file
    no longer names it. A step whose file's directory is gone is kept: it
    may have been moved."""
    name = (info.metadata or {}).get("lightning_file")
    if not name:
        return False
    path = name if ("://" in name or os.path.isabs(name)) else \
        _join(root, name)
    try:
        fs = get_filesystem(path)
        if not fs.exists(path):
            return fs.isdir(_split(path)[0])
        pointer = _read_pointer(path)
    except (OSError, _errors.Error):
        return False  # unreadable now, or newer: keep it
    return pointer is None or not (
        pointer["step"] == info.step and _pointed_root(pointer, path) == root)


def _fspath(path):
    path = os.fspath(path)
    if not isinstance(path, str):
        raise _errors.InvalidArgument(f"a checkpoint path is text, not "
                                      f"{path!r}")
    return path


def _is_local(path):
    return "://" not in path or path.startswith("file://")


def _local_path(path):
    return path[len("file://"):] if path.startswith("file://") else path


def _normal(url):
    """One spelling per root: absolute local paths, URLs without a
    trailing slash."""
    if _is_local(url):
        return os.path.abspath(_local_path(url))
    return url.rstrip("/")


def _split(path):
    """(directory, file name) of a path or URL, the directory _normal."""
    if _is_local(path):
        directory, base = os.path.split(os.path.abspath(_local_path(path)))
        return directory, base
    directory, _, base = path.rstrip("/").rpartition("/")
    return directory, base


def _join(root, name):
    return os.path.join(root, name) if _is_local(root) else f"{root}/{name}"


def _count(value):
    """An int of Lightning's dict (global_step, epoch), or None."""
    return value if type(value) is int and value >= 0 else None


def _close(mgr):
    close = getattr(mgr, "close", None)
    if close is not None:  # else the lease goes with the last reference
        close()
