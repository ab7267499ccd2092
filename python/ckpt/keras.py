"""ckpt.keras: Keras 3's BackupAndRestore callback, backed up through ckpt.

    import ckpt.keras
    model.fit(x, y, epochs=10,
              callbacks=[ckpt.keras.BackupAndRestore("/data/run42-backup")])

A fit interrupted (a crash, a preemption, an exception) and started again
with the same callback continues where the backup left it; when fit ends
well the backup is deleted (delete_checkpoint=True). It uses Keras's
public callback and variable calls, and the model._initial_epoch that
Keras's own callback sets; it is tested on Keras's JAX and torch backends
(not on TensorFlow, which the project does not install). It takes the
arguments of Keras's own keras.callbacks.BackupAndRestore, with a ckpt
root (a path, file://, s3://, mem://) for its backup_dir.

What a backup is (docs/keras.md says more):

- One committed ckpt step of the root: the model's variables
  (model.variables: weights, non-trainable state, seed generators), the
  optimizer's and the metrics', as NumPy arrays named by group and
  variable path ("model/sequential/dense/kernel",
  "optimizer/adam/iteration"), and one metadata entry "keras": its step
  (so that a restore that fell back to an older step knows it), the epoch to
  start from, the last batch done in it (-1: none), the batches trained so
  far, each entry's Keras dtype and the variables' order (a model built
  again in one process, whose names Keras numbers anew, is matched by
  it). bfloat16, float8_e4m3fn and float8_e5m2 (NumPy arrays of
  ml_dtypes) are stored as BF16, F8_E4M3 and F8_E5M2, Keras's other
  dtypes that NumPy lacks as their raw bits (U8, U16); either is restored
  bit for bit as the dtype the entry records. The step's number is the
  count of batches trained; keep_last=1 (2 with double_checkpoint=True)
  keeps the newest backups only, and a restore that finds the newest
  damaged falls back to the one before it.
- Restoring, at the start of fit, reads the newest backup whole, checks
  every entry against the model (the same variable paths, shapes and
  dtypes) before it assigns anything, then assigns the model's and the
  optimizer's variables and sets the epoch fit starts at, as Keras's own
  callback does (model._initial_epoch). A backup that disagrees with the
  model raises ckpt.InvalidArgument naming the root, the step and the
  entry, and changes nothing.
- A backup taken in the middle of an epoch (save_freq=N): Keras's callback
  runs that epoch again from its first batch on the backed-up weights, so
  that the batches before the backup are trained twice. This one runs
  them too (the data and every callback see the same batches), counts
  them for no backup, and at the end of the backed-up batch assigns the
  backup's variables again, metrics included: the resumed fit ends with
  the very values of a fit that was never interrupted.
- Each backup and the final deletion open the root, save, and close it:
  the root's lease is held only while ckpt writes, so that a fit started
  again in the same process, with another callback object, can write it.

Keras must be importable: ckpt's core never imports this module.
"""

import os
import re
import sys
import warnings

import ckpt
from ckpt import _errors, _options

try:
    import keras
    import ml_dtypes
    import numpy as np
except ImportError as e:
    raise ImportError(
        f"ckpt.keras needs Keras 3 (pip install keras, and a backend: jax, "
        f"torch or tensorflow): {e}") from None

if not hasattr(keras, "callbacks") or \
        int(keras.__version__.split(".")[0]) < 3:
    raise ImportError(f"ckpt.keras needs Keras 3, not Keras "
                      f"{keras.__version__}")

__all__ = ["BackupAndRestore"]

BACKUP_FORMAT = "ckpt.keras BackupAndRestore"
BACKUP_VERSION = 1

# A backup is one process's; several writers, or a retention that could
# drop the newest backup, would break the restore.
_REFUSED = ("communicator", "keep_every_n_steps", "keep_every_seconds",
            "keep_best", "best_metric", "min_seconds_between_saves")


class BackupAndRestore(keras.callbacks.Callback):
    """Backs up the training state to a ckpt root and restores it when fit
    starts again (see the module's doc).

    url: the root (a path, file://, s3://, mem://), used by this callback
    alone; Keras's keyword for it, backup_dir=, is taken too. save_freq:
    "epoch" backs up at the end of each epoch, an int N every N batches.
    double_checkpoint=True keeps the two newest backups (keep_last=2).
    delete_checkpoint=True deletes the backups once fit ends well. Other
    keyword arguments go to ckpt.open (chunk_size, lease_seconds, catalog,
    keep_last, ...).
    """

    def __init__(self, url=None, save_freq="epoch", double_checkpoint=False,
                 delete_checkpoint=True, *, backup_dir=None, **options):
        super().__init__()
        if url is not None and backup_dir is not None:
            raise _errors.InvalidArgument(
                "ckpt.keras.BackupAndRestore: both url and backup_dir; "
                "give one (backup_dir is Keras's name for the same root)")
        url = backup_dir if url is None else url
        if not url:
            raise _errors.InvalidArgument(
                "ckpt.keras.BackupAndRestore: an empty url; name the root "
                "of the backups (a path, file://, s3://)")
        if save_freq != "epoch" and (type(save_freq) is not int or
                                     save_freq < 1):
            raise _errors.InvalidArgument(
                f"ckpt.keras.BackupAndRestore(save_freq={save_freq!r}): "
                f"'epoch' or a number of batches (an int, 1 or more)")
        _options.check_names(
            "ckpt.keras.BackupAndRestore()", options,
            ("save_freq", "double_checkpoint", "delete_checkpoint",
             "backup_dir"))
        refused = sorted(set(options) & set(_REFUSED))
        if refused:
            raise _errors.InvalidArgument(
                f"ckpt.keras.BackupAndRestore({refused[0]}=...): a backup is "
                f"one process's newest training state; keep_last (or "
                f"double_checkpoint) says how many are kept")
        options.setdefault("keep_last", 2 if double_checkpoint else 1)
        self.url = os.fspath(url)
        self.save_freq = save_freq
        self.double_checkpoint = bool(double_checkpoint)
        self.delete_checkpoint = bool(delete_checkpoint)
        self._options = options
        self._reset()

    def __repr__(self):
        return (f"ckpt.keras.BackupAndRestore({self.url!r}, "
                f"save_freq={self.save_freq!r})")

    def _reset(self):
        self._epoch = 0          # the epoch in progress, or the next one
        self._batch = -1         # the last batch done in it
        self._batches = 0        # batches trained, over every epoch
        self._since_backup = 0   # batches trained since the last backup
        self._last_step = -1     # the newest backup's step
        self._replay = None      # a mid-epoch backup to assign again
        self._set_initial_epoch = False

    # Keras's hooks.

    def on_train_begin(self, logs=None):
        model = self.model
        if not model.built:
            raise ValueError(
                f"ckpt.keras.BackupAndRestore: the model {model.name!r} is "
                f"not built; build it before fit() (call it on a batch, or "
                f"model.build(input_shape)) so that its variables exist")
        if model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        self._reset()
        backup = self._read()
        if backup is None:
            return
        step, meta, values = backup
        # The metrics only matter in an epoch under way.
        groups = _GROUPS if meta["batch"] >= 0 else _GROUPS[:2]
        targets = _checked(model, values, meta, groups,
                           f"restore {self.url} (step {step})")
        _assign(targets, values, ("model", "optimizer"))
        self._last_step = step
        self._epoch = meta["epoch"]
        self._batches = meta["batches"]
        if meta["batch"] >= 0:
            self._replay = (meta, values, targets)
        if meta["epoch"] > 0:
            # What Keras's own callback sets: fit's loop starts there.
            model._initial_epoch = meta["epoch"]
            self._set_initial_epoch = True

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._batch = -1

    def on_train_batch_end(self, batch, logs=None):
        if self._replay is not None and self._replayed(batch):
            return
        self._batches += batch - self._batch
        self._since_backup += batch - self._batch
        self._batch = batch
        if self.save_freq != "epoch" and self._since_backup >= self.save_freq:
            self._backup()

    def on_epoch_end(self, epoch, logs=None):
        self._epoch = epoch + 1
        self._batch = -1
        if self.save_freq == "epoch":
            self._backup()

    def on_train_end(self, logs=None):
        if self._set_initial_epoch:
            # Keras's callback leaves it set, and a later fit of the model
            # without a backup would start at that epoch.
            self.model._initial_epoch = None
            self._set_initial_epoch = False
        if self.delete_checkpoint:
            self._delete()

    # The work.

    def _replayed(self, batch):
        """Whether `batch` is one that the backup being replayed covers: a
        batch before it is not counted; at its own batch the backup's
        values are assigned again."""
        meta, values, targets = self._replay
        if self._epoch == meta["epoch"] and batch < meta["batch"]:
            return True
        self._replay = None
        if self._epoch != meta["epoch"] or batch != meta["batch"]:
            warnings.warn(
                f"ckpt.keras.BackupAndRestore: the backup of {self.url} was "
                f"taken after batch {meta['batch']} of epoch "
                f"{meta['epoch']}, which this fit did not end at (it is at "
                f"batch {batch} of epoch {self._epoch}: steps_per_execution "
                f"or the data changed?); training goes on from the values "
                f"restored when fit began, as Keras's callback would",
                RuntimeWarning, stacklevel=3)
            return False
        # On JAX, reading self.model puts fit's state of the step into the
        # variables, and has the next step read them back (assigned).
        _ = self.model
        _assign(targets, values, _GROUPS)
        self._batch = batch
        self._since_backup = 0
        return True

    def _backup(self):
        model = self.model  # on JAX, this syncs the variables of the step
        step = max(self._batches, self._last_step + 1)
        state, dtypes, order = _arrays(model)
        state["keras"] = ckpt.Metadata({
            "format": BACKUP_FORMAT, "version": BACKUP_VERSION,
            "step": step, "epoch": self._epoch, "batch": self._batch,
            "batches": self._batches, "backend": keras.backend.backend(),
            "dtypes": dtypes, "order": order})
        epoch = self._epoch if self._batch >= 0 else self._epoch - 1
        with ckpt.open(self.url, **self._options) as mgr:
            mgr.save(step, state, epoch=max(epoch, -1))
        self._last_step = step
        self._since_backup = 0

    def _read(self):
        """(step, metadata, {group: {path: array}}) of the newest backup
        that loads whole, or None when there is none."""
        with ckpt.open(self.url, **self._options) as mgr:
            try:
                if mgr.latest() is None:
                    return None
                with warnings.catch_warnings():
                    # BF16 and F8 entries without torch come back as their
                    # bits, which _value views as the recorded dtype.
                    warnings.filterwarnings(
                        "ignore", message=".*returning its raw bits")
                    state = mgr.load()  # the newest that loads whole
            except _errors.NotFound:
                return None
        meta = state.get("keras")
        step = meta.get("step") if isinstance(meta, ckpt.Metadata) else None
        where = f"restore {self.url} (step {step})"
        if not isinstance(meta, ckpt.Metadata) or \
                meta.get("format") != BACKUP_FORMAT:
            raise _errors.InvalidArgument(
                f"{where}: not a backup of ckpt.keras.BackupAndRestore (no "
                f"metadata entry 'keras' of format {BACKUP_FORMAT!r}); the "
                f"root holds other checkpoints: give the callback a root of "
                f"its own")
        if type(meta.get("version")) is not int or \
                meta["version"] > BACKUP_VERSION:
            raise _errors.FailedPrecondition(
                f"{where}: a backup of version {meta.get('version')!r}; this "
                f"ckpt.keras reads version {BACKUP_VERSION}")
        for key in ("step", "epoch", "batch", "batches"):
            if type(meta.get(key)) is not int:
                raise _errors.DataLoss(
                    f"{where}: entry 'keras' has no int {key!r}")
        return step, meta, state

    def _delete(self):
        with ckpt.open(self.url, **self._options) as mgr:
            try:
                infos = mgr.list()
            except _errors.NotFound:
                return
            for info in reversed(infos):
                mgr.delete(info.step)


# Variables and arrays.

_GROUPS = ("model", "optimizer", "metrics")
# The ml_dtypes that ckpt stores as themselves (BF16, F8_E4M3, F8_E5M2).
_NATIVE = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def _variables(model, group):
    if group == "model":
        return list(model.variables)
    if group == "optimizer":
        return [] if model.optimizer is None else \
            list(model.optimizer.variables)
    return list(model.metrics_variables)


def _named(model, group):
    """{path: variable} of one group; two variables of one path (layers of
    the same name) cannot be told apart in a backup."""
    named = {}
    for v in _variables(model, group):
        if v.path in named and named[v.path] is not v:
            raise _errors.InvalidArgument(
                f"ckpt.keras.BackupAndRestore: two {group} variables have the "
                f"path {v.path!r}; give their layers distinct names")
        named[v.path] = v
    return named


def _arrays(model):
    """({group: {path: array}}, {entry: Keras dtype}, {group: [path, ...]
    in the model's order}) of the model now."""
    state, dtypes, order = {}, {}, {}
    for group in _GROUPS:
        arrays = state[group] = {}
        named = _named(model, group)
        order[group] = list(named)
        for path, v in named.items():
            array = _host(v)
            if array.dtype.kind == "V" and array.dtype.name not in _NATIVE:
                array = array.view(f"u{array.dtype.itemsize}")
            arrays[path] = array
            dtypes[f"{group}/{path}"] = v.dtype
    return state, dtypes, order


def _torch_float8(variable):
    """The torch dtype of `variable` where it is a torch tensor of a
    float8 dtype (Keras's torch backend), which torch cannot hand to NumPy
    or take from it; else None."""
    torch = sys.modules.get("torch")
    if torch is None or variable.dtype not in _NATIVE[1:] or \
            not isinstance(variable.value, torch.Tensor):
        return None
    return getattr(torch, variable.dtype, None)


def _host(variable):
    """The variable's value as a NumPy array of its dtype: a torch float8
    tensor through its bits (keras.ops.convert_to_numpy raises on one)."""
    if _torch_float8(variable) is not None:
        import torch
        bits = variable.value.detach().cpu().contiguous().view(torch.uint8)
        return bits.numpy().copy().view(getattr(ml_dtypes, variable.dtype))
    return np.asarray(keras.ops.convert_to_numpy(variable.value))


def _plain(path):
    """`path` without the numbers Keras appends to names it makes unique in
    a process ("dense_3/kernel" -> "dense/kernel", "adam_2/iteration",
    "seed_generator_4/seed_generator_state", and an optimizer's slot
    "adam_2/sequential_2_dense_4_bias_momentum", which names its
    variable's path inside its own)."""
    return re.sub(r"_[0-9]+(?=[_/]|$)", "", path)


def _by_position(named, saved, order):
    """{saved path: model path} where the backup's variables (`order`, as
    it recorded them) and the model's differ only in those numbers, one
    for one in order: the same model built again in one process (a
    notebook, a retry), whose layers, optimizer and seed generators Keras
    names anew. None where they differ otherwise, or the backup recorded
    no order."""
    if not isinstance(order, list) or len(order) != len(named) or \
            set(order) != set(saved):
        return None
    pairs = dict(zip(order, named))
    if all(_plain(s) == _plain(m) for s, m in pairs.items()):
        return pairs
    return None


def _checked(model, values, meta, groups, where):
    """{group: {path: variable}} of the model, once every entry of the
    backup in `groups` has a variable of the same path, shape and dtype and
    every variable an entry; else ckpt.InvalidArgument naming the first
    that does not."""
    dtypes = meta.get("dtypes")
    if not isinstance(dtypes, dict):
        raise _errors.DataLoss(f"{where}: entry 'keras' has no dtypes")
    recorded, dtypes = dtypes, dict(dtypes)
    order = meta.get("order") if isinstance(meta.get("order"), dict) else {}
    targets = {}
    for group in groups:
        named = targets[group] = _named(model, group)
        saved = values.get(group) or {}
        if not isinstance(saved, dict):
            raise _errors.DataLoss(f"{where}: entry {group!r} is not a "
                                   f"group of arrays")
        renamed = None if set(saved) == set(named) else \
            _by_position(named, saved, order.get(group))
        # The backup's entry of a path (as `ckpt show` lists it: the group,
        # a dot, the path it was saved under), and the model's variable.
        origin = {m: s for s, m in (renamed or {}).items()}

        def entry_of(path):
            if path in origin:
                return (f"'{group}.{origin[path]}' (matched by position to "
                        f"the model's variable '{group}/{path}')")
            return f"'{group}.{path}'"
        if renamed is not None:
            # From here on the backup's arrays go by the model's paths.
            saved = values[group] = {m: saved[s] for s, m in renamed.items()}
            for s, m in renamed.items():
                dtypes[f"{group}/{m}"] = recorded.get(f"{group}/{s}")
        for path in sorted(set(saved) | set(named)):
            entry = f"{group}/{path}"
            if path not in named:
                raise _errors.InvalidArgument(
                    f"{where}: entry {entry_of(path)} names no variable of "
                    f"the model (it has {_some(named)}); the backup is of "
                    f"another model, or its layers were named otherwise; "
                    f"nothing was restored")
            if path not in saved:
                raise _errors.InvalidArgument(
                    f"{where}: the model's variable {entry!r} is not in the "
                    f"backup; the backup is of another model; nothing was "
                    f"restored")
            v, array = named[path], saved[path]
            shape = tuple(getattr(array, "shape", ()))
            held = dtypes.get(entry)
            if held != v.dtype and not _same_seed(path, held, v.dtype) or \
                    shape != tuple(v.shape):
                raise _errors.InvalidArgument(
                    f"{where}: entry {entry_of(path)} is "
                    f"{dtypes.get(entry)} {list(shape)} in the backup and "
                    f"{v.dtype} {list(v.shape)} in the model; nothing was "
                    f"restored")
            _value(array, v.dtype, entry, where)  # raises if it cannot be
    return targets


# A seed generator's state (Dropout's, a RandomFlip's...): Keras keeps it
# as uint32 on JAX and int32 on torch, the same 64 bits either way.
_SEED_DTYPES = {"int32", "uint32"}


def _same_seed(path, held, wanted):
    """Whether `path` is a seed generator's state, stored as `held` and
    wanted as `wanted`: another backend's dtype for the same bits."""
    return path.endswith("seed_generator_state") and \
        {held, wanted} == _SEED_DTYPES


def _value(array, dtype, entry, where):
    """The array to assign to a variable of Keras dtype `dtype`: raw bits
    viewed as that dtype again when NumPy lacks it."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(array, torch.Tensor):
        # BF16 loads as a torch.bfloat16 tensor wherever torch imports.
        array = array.contiguous().view(torch.int16).numpy().view(np.uint16)
    if not isinstance(array, np.ndarray):
        raise _errors.DataLoss(f"{where}: entry {entry!r} is not an array")
    if {array.dtype.name, dtype} == _SEED_DTYPES:
        return array.view(dtype)  # _checked let only a seed's state here
    wanted = getattr(ml_dtypes, dtype, None)
    if wanted is not None and array.dtype != wanted:
        if array.dtype.kind != "u" or \
                array.dtype.itemsize != np.dtype(wanted).itemsize:
            raise _errors.DataLoss(
                f"{where}: entry {entry!r} holds {array.dtype}, not the bits "
                f"of a {dtype}")
        return array.view(wanted)
    return array


def _assign(targets, values, groups):
    for group in groups:
        for path, v in targets.get(group, {}).items():
            value = _value(values[group][path], v.dtype, f"{group}/{path}",
                           "restore")
            float8 = _torch_float8(v)
            if float8 is not None:
                # torch takes no NumPy float8 array: its bits, as a tensor.
                import torch
                bits = np.array(value, order="C").view(np.uint8)
                value = torch.from_numpy(bits).view(float8)
            v.assign(value)


def _some(named, count=3):
    paths = sorted(named)
    shown = ", ".join(repr(p) for p in paths[:count])
    return (f"{shown}, ... ({len(paths)} in all)" if len(paths) > count
            else shown or "none")
