"""ckpt.jax: JAX pytrees on ckpt, with the calls of Orbax's
CheckpointManager.

    import ckpt.jax
    with ckpt.jax.CheckpointManager("/data/run42", keep_last=3) as mgr:
        if mgr.latest_step() is not None:    # resume onto this job's mesh
            state = mgr.restore(target=abstract_state)
        for step in range(int(state["step"]) + 1, num_steps + 1):
            state = train_step(state)
            mgr.save(step, state)            # asynchronous by default

A pytree may hold jax.Arrays (on one device, replicated, or sharded over a
mesh of this process's devices), NumPy arrays, Python scalars, strings,
bytes and None, in dicts, lists, tuples, namedtuples and any registered
node. Dtypes: bool, int8..int64, uint8..uint64, float16, bfloat16,
float32, float64, float8_e4m3fn and float8_e5m2 (another, such as int4 or
float8_e4m3fnuz, is ckpt.InvalidArgument naming the entry).

Entries are named by their paths, joined with dots ("params.dense.kernel",
"opt_state.0.mu"): ckpt._jax_tree says how. A sharded or replicated
jax.Array is saved as one tensor of its global shape, each distinct shard
copied to the host once; `ckpt show` and ckpt.open(url).load() see plain
NumPy-shaped entries (bfloat16 as BF16).

restore(step, target=...) reads each stored chunk once and hands every
device of the target's sharding its box, on any mesh: another shape,
another number of devices, or one device (ckpt._jax_restore says how).
The target is a pytree of jax.ShapeDtypeStructs with shardings
(jax.eval_shape of the init function, with NamedShardings), or of arrays
whose shardings are reused; without a target, the saved structure comes
back with jax.Arrays on the default device.

This module saves from one process (every array fully addressable); the
core ckpt.CheckpointManager under mpirun is the way for many.
"""

import operator

import jax  # noqa: F401 - without JAX, `import ckpt.jax` fails at once

from ckpt import (_errors, _jax_restore, _jax_tree, _manager, _options,
                  _save_options)

__all__ = ["CheckpointManager"]

# Orbax's CheckpointManager arguments and CheckpointManagerOptions fields
# -> what ckpt.jax takes instead.
_ORBAX_OPTIONS = {
    "options": "its options as keywords: keep_last=, save_interval_steps=, "
               "async_save=, keep_best= and best_metric=",
    "max_to_keep": "keep_last=N",
    "enable_async_checkpointing": "async_save=",
    "best_fn": "keep_best=N with best_metric='NAME' (a key of save()'s "
               "metrics)",
    "best_mode": "best_higher_is_better=True for best_mode='max'",
    "keep_period": "keep_every_n_steps=",
    "keep_time_interval": "keep_every_seconds=",
    "create_options": "create=",
    "item_names": "one pytree per step (put several in a dict)",
    "item_handlers": "one pytree per step (put several in a dict)",
    "handler_registry": "one pytree per step (put several in a dict)",
}


def _orbax_item(args, call):
    """The pytree that Orbax's save or restore args carry (StandardSave,
    PyTreeSave, StandardRestore, ...: their `item`)."""
    # A Composite answers every attribute as a key (a KeyError, not an
    # AttributeError): known by its class's keys().
    if callable(getattr(type(args), "keys", None)):
        raise TypeError(
            f"{call}: args= is Orbax's Composite of {sorted(args.keys())}; "
            f"ckpt.jax saves one pytree a step: put the items in a dict "
            f"(save(step, {{'state': ..., ...}}), restore(step, target="
            f"{{'state': ..., ...}})) (docs/jax.md)")
    try:
        return args.item
    except AttributeError:
        raise TypeError(
            f"{call}: args= takes Orbax's StandardSave/StandardRestore (or "
            f"PyTreeSave/PyTreeRestore), not {type(args).__name__}; or "
            f"give the pytree itself (docs/jax.md)") from None


class CheckpointManager:
    """Saves and restores JAX pytrees as the steps of one ckpt root.

    url: a path, file://, s3:// or mem:// URL (ckpt.open's). keep_last:
    how many of the newest steps retention keeps (None: all; Orbax's
    max_to_keep). create=True makes the root if it does not exist (a
    job's first run); False makes a missing root ckpt.NotFound.
    async_save=True (the default, as Orbax's) returns from save() once the
    arrays are on the host; the step is written and committed in the
    background (wait_until_finished()). save_interval_steps: save()
    saves only the steps that are a multiple of it (others return False),
    and, as Orbax's does, any step while the root has none yet (a job's
    first save is not put off).
    Other keyword options go to ckpt.CheckpointManager: keep_best and
    best_metric (with save(metrics=...)), keep_every_n_steps, catalog,
    chunk_size, lease_seconds, ...

    Errors are ckpt.Error subclasses naming the entry and the operation.
    close() (or the end of a with block) waits for the save in flight and
    gives the root's lease back.
    """

    def __init__(self, url, keep_last=None, *, create=True, async_save=True,
                 save_interval_steps=1, **options):
        for name in options:
            if name in _ORBAX_OPTIONS:
                raise TypeError(
                    f"ckpt.jax.CheckpointManager({url!r}): {name}= is "
                    f"Orbax's; ckpt.jax takes {_ORBAX_OPTIONS[name]} "
                    f"(docs/jax.md)")
        _options.check_names("ckpt.jax.CheckpointManager()", options,
                             ("keep_last", "create", "async_save",
                              "save_interval_steps"))
        if keep_last is not None and (isinstance(keep_last, bool) or
                                      not isinstance(keep_last, int) or
                                      keep_last < 1):
            raise _errors.InvalidArgument(
                f"ckpt.jax.CheckpointManager({url!r}): keep_last="
                f"{keep_last!r}; a number of steps >= 1, or None to keep "
                f"every step")
        if isinstance(save_interval_steps, bool) or not isinstance(
                save_interval_steps, int) or save_interval_steps < 1:
            raise _errors.InvalidArgument(
                f"ckpt.jax.CheckpointManager({url!r}): save_interval_steps="
                f"{save_interval_steps!r}; a number of steps >= 1")
        self._async = bool(async_save)
        self._interval = save_interval_steps
        self._has_steps = None  # known once asked: a listing, not each save
        self._mgr = _manager.CheckpointManager(
            url, keep_last=keep_last or 0, create=create, **options)

    @property
    def manager(self):
        """The ckpt.CheckpointManager underneath (list(), describe(),
        delete(), ...)."""
        return self._mgr

    @property
    def url(self):
        return self._mgr.url

    def __repr__(self):
        return f"ckpt.jax.CheckpointManager({self.url!r})"

    def _step_of(self, step, call):
        try:
            return operator.index(step)
        except TypeError:
            raise TypeError(f"{call}({step!r}) of {self.url}: a step must "
                            f"be an int, not {type(step).__name__}") \
                from None

    def _due(self, step, listed):
        """save_interval_steps' rule, and Orbax's first save: a step is due
        where the root has no step yet. `listed`: list the root now, else
        once for the manager's life (a save then knows it has one)."""
        if step % self._interval == 0:
            return True
        if listed or self._has_steps is None:
            self._has_steps = bool(self._mgr.list())
        return not self._has_steps

    def save(self, step, pytree=None, *, args=None, metrics=None,
             epoch=None, metadata=None, force=False):
        """Saves `pytree` as checkpoint `step`; True when it was saved (or,
        asynchronous, started), False when save_interval_steps (unless
        force=True, or the root has no step yet) or
        min_seconds_between_saves skipped it. Orbax's spelling,
        save(step, args=ocp.args.StandardSave(pytree)), saves its item.

        Every jax.Array is first brought to the host (each distinct shard
        copied once; an array in host memory, on the CPU backend, read in
        place through a view that keeps its buffer alive), and NumPy
        arrays are copied: the arrays may then change, be donated or be
        deleted at once. An asynchronous save then returns, and the
        library stages and writes the host arrays on its own thread; one
        save is in flight at a time (the next call waits for it), and its
        error is raised by wait_until_finished() or close(); until one of
        them has raised it, every later asynchronous save saves nothing
        and ends with that error, naming its step (no step is lost
        unseen). `metrics` (str ->
        float: keep_best), `epoch` and `metadata` (str -> str) go into the
        manifest. A committed step that loads whole is ckpt.AlreadyExists
        (one whose data files' safetensors headers alone are damaged is
        replaced, with a warning: restore() reads no header, other
        safetensors readers do).
        """
        step = self._step_of(step, "save")
        if args is not None:
            if pytree is not None:
                raise TypeError(f"save step {step} to {self.url}: give the "
                                f"pytree or Orbax's args=, not both")
            pytree = _orbax_item(args, f"save step {step} to {self.url}")
        if not force and not self._due(step, listed=False):
            return False
        try:
            state = _jax_tree.plain(pytree,
                                    _jax_tree.saved_leaf(self._async))
        except _errors.Error as e:
            _save_options.name_the_save(e, step, self.url)
            raise
        if not isinstance(state, dict):
            raise _errors.InvalidArgument(
                f"save step {step} to {self.url}: the pytree is a "
                f"{type(pytree).__name__}; ckpt.jax saves a pytree whose "
                f"top is a dict or a registered node (a namedtuple, a "
                f"dataclass): put a list, a tuple or a leaf in a dict")
        if self._async:
            # The host copies are this call's own: the library may stage
            # them on its thread while the caller goes on.
            self._mgr.save_async(step, state, metadata, epoch, metrics,
                                 stage_in_background=True)
            self._has_steps = True
            return True
        result = self._mgr.save(step, state, metadata, epoch, metrics)
        if not result.skipped:
            self._has_steps = True
        return not result.skipped

    def should_save(self, step):
        """Orbax's should_save: whether `step` is due, a multiple of
        save_interval_steps (or any step of a root with none yet) and newer
        than latest_step() (False for a step saved already, or older than
        the newest). save(step, ...) saves a due step (unless
        min_seconds_between_saves skips it)."""
        step = self._step_of(step, "should_save")
        if not self._due(step, listed=True):
            return False
        latest = self.latest_step()
        return latest is None or step > latest

    def restore(self, step=None, target=None, *, args=None):
        """The pytree of checkpoint `step` (None: the newest that loads
        whole; a newer damaged one is skipped with a RuntimeWarning).

        `target`: a pytree of the structure saved, whose leaves say what
        to make: a jax.ShapeDtypeStruct with a sharding, or a jax.Array
        (its sharding is reused), becomes a jax.Array on those devices; one
        without a sharding, on the default device; a NumPy array, a NumPy
        array; any other leaf (a scalar) takes the stored value. Where a
        Python scalar was saved, a weak-typed 0-d leaf (what
        jax.eval_shape makes of one) gets the scalar as saved (an int, a
        float); another 0-d leaf gets it as an array of its dtype, if that
        holds the value exactly (else ckpt.InvalidArgument). A 64-bit
        array that JAX would narrow (jax_enable_x64 off) stays a NumPy
        array, its target leaf's dtype 64-bit or the 32-bit one that
        jax.eval_shape narrowed it to. Shapes
        and dtypes must be the stored ones and the structures the same
        (else ckpt.InvalidArgument or ckpt.NotFound naming the entry; the
        target is never changed). Without a target, the saved structure
        (other nodes as dicts) with jax.Arrays on the default device.
        Orbax's spelling, restore(step, args=ocp.args.StandardRestore(t)),
        takes its item as the target.
        """
        if args is not None:
            if target is not None:
                raise TypeError(f"restore from {self.url}: give target= or "
                                f"Orbax's args=, not both")
            target = _orbax_item(args, f"restore from {self.url}")
        return self._mgr._newest_whole(
            step, "restore",
            lambda s: _jax_restore.restore_step(self._mgr, s, target))

    def latest_step(self):
        """The step restore() without a step loads, or None: the newest
        committed step whose data objects are all there at their recorded
        sizes (one listing of the root; no data is read). While every step
        is whole, max(all_steps()). A newer step that lost a data object,
        or whose object is truncated, is still in all_steps() but not
        named here. Damage that only reading finds (a flipped byte) is not
        seen: such a step is named, and restore() skips it, with a
        RuntimeWarning, for the next older step that loads whole."""
        return self._mgr.latest()

    def all_steps(self):
        """Every committed step, oldest first, whole or not: a step that
        lost a data object is listed (manager.list()'s `incomplete` says
        what it lacks) until deleted; latest_step() passes it over, and
        restore() skips it with a RuntimeWarning."""
        return [info.step for info in self._mgr.list()]

    def best_step(self):
        """Orbax's best_step: the step whose `best_metric` (a key of
        save()'s metrics) is best, lower unless best_higher_is_better, the
        newer of equals; None while no committed step has that metric.
        Without best_metric, latest_step(), as Orbax without best_fn."""
        metric = self._mgr._options["best_metric"]
        if not metric:
            return self.latest_step()
        higher = self._mgr._options["best_higher_is_better"]
        scored = [(info.metrics[metric], info.step)
                  for info in self._mgr.list()
                  if metric in (info.metrics or {})]
        if not scored:
            return None
        return max(scored, key=lambda s: (s[0] if higher else -s[0],
                                          s[1]))[1]

    def metrics(self, step):
        """Orbax's metrics(step): the metrics save() recorded for `step`
        (a dict of str to float), or None where it recorded none."""
        step = self._step_of(step, "metrics")
        for info in self._mgr.list():
            if info.step == step:
                return dict(info.metrics) if info.metrics else None
        raise _errors.NotFound(f"metrics({step}) of {self.url}: step "
                               f"{step} is not a committed checkpoint")

    def delete(self, step):
        """Orbax's delete(step): deletes committed step `step` (waiting
        for the save in flight first); ckpt.FailedPrecondition for a step
        that a kept incremental step depends on."""
        step = self._step_of(step, "delete")
        self._mgr.wait()
        self._mgr.delete(step)
        self._has_steps = None

    def reload(self):
        """Orbax's reload(): forgets what this object knows of the root's
        steps (whether it has any, for save_interval_steps), so that steps
        another process saved or deleted count; every other call reads
        the root anew already."""
        self._has_steps = None

    def wait_until_finished(self):
        """Waits for the asynchronous saves started so far and raises the
        first one's error."""
        self._mgr.wait()

    def close(self):
        """Waits for the save in flight and gives the root's lease back;
        every later call raises ckpt.FailedPrecondition."""
        self._mgr.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        return self._mgr.__exit__(exc_type, exc, tb)
