"""The libraries bench/peers/peers.py runs, one class each, on one state.

A library has a `name`, `save(path)` and, where it has a load of its own,
`load(path)` and `check(loaded)`. save() returns None when the state is
durable, or a callable that waits until it is (an asynchronous save: the
caller was blocked until save() returned). load() returns what it loaded,
every page of it read (see touch); check() raises unless it is the state,
bit for bit, and runs outside the timing. `files(path)` is where the
library wrote, for the page cache to be dropped before a load.

The state (peers.make_state) is a dict of torch tensors: {"model": {name:
tensor}, "optim": {"state": {name: {"exp_avg", "exp_avg_sq", "step"}},
"step": tensor}}. Orbax gets the same bytes as JAX arrays on the CPU.
"""

import os
import warnings

import torch

from peers import fsync_path  # beside this file

# DCP in one process without a process group says so on every call.
warnings.filterwarnings("ignore", message="torch.distributed is disabled")
warnings.filterwarnings("ignore", category=FutureWarning)

PAGE = 4096


def fsync_tree(path):
    """Makes what a library wrote at `path` durable as ckpt makes its own:
    fsync of every file and folder under it, then of the folder that holds
    it (a file fsynced already costs next to nothing)."""
    if os.path.isdir(path):
        for folder, _, names in os.walk(path, topdown=False):
            for n in names:
                fsync_path(os.path.join(folder, n))
            fsync_path(folder)
    else:
        fsync_path(path)
    fsync_path(os.path.dirname(os.path.abspath(path)))


def drop_cached(path):
    """Drops the page cache of every file under `path`: the load that
    follows reads the disk. Called for every library alike, after its save
    is durable (a clean page is dropped; nothing of other processes is)."""
    paths = [path] if os.path.isfile(path) else [
        os.path.join(folder, n)
        for folder, _, names in os.walk(path) for n in names]
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def leaves(tree, prefix=""):
    """(dotted name, leaf) of a nested dict, in order."""
    for k, v in tree.items():
        if isinstance(v, dict):
            yield from leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def unflatten(flat):
    out = {}
    for name, v in flat.items():
        *path, last = name.split(".")
        d = out
        for k in path:
            d = d.setdefault(k, {})
        d[last] = v
    return out


def touch(loaded):
    """Reads a byte of every page of every tensor loaded: a library that
    maps its file (safetensors) has then read it too, as the others have.
    Inside every load's timing alike."""
    for _, t in leaves(loaded):
        if isinstance(t, torch.Tensor):
            t.reshape(-1).view(torch.uint8)[::PAGE].sum()
        else:  # a JAX array: a view of its host memory on the CPU
            import numpy as np
            np.asarray(t).reshape(-1).view(np.uint8)[::PAGE].sum()


def same(state, loaded, who):
    """Raises unless `loaded` holds `state`'s names, dtypes, shapes and
    bits (bits, not values: -0.0 and NaNs compare)."""
    want = dict(leaves(state))
    got = dict(leaves(loaded))
    if set(want) != set(got):
        raise AssertionError(f"{who}: loaded names differ: "
                             f"{sorted(set(want) ^ set(got))[:3]}")
    for name, t in want.items():
        u = got[name]
        if not isinstance(u, torch.Tensor):
            u = jax_to_torch(u)
        if u.dtype != t.dtype or u.shape != t.shape or not torch.equal(
                t.reshape(-1).view(torch.uint8),
                u.reshape(-1).view(torch.uint8)):
            raise AssertionError(f"{who}: {name} differs "
                                 f"({u.dtype} {tuple(u.shape)})")


def jax_to_torch(array):
    import numpy as np
    a = np.asarray(array)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def torch_to_jax(t):
    import jax
    import ml_dtypes
    if t.dtype == torch.bfloat16:
        a = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    else:
        a = t.numpy()
    return jax.device_put(a)


class Ckpt:
    """ckpt's CheckpointManager on the torch tensors: save (or save_async,
    asynchronous=True) and load(as_torch=True), new tensors the bytes are
    read straight into. One manager per root for the whole run, as a job
    keeps one; the previous step is deleted before the timing (the peers'
    files are removed after theirs)."""

    def __init__(self, state, base, asynchronous=False):
        import ckpt
        self.name = "ckpt async" if asynchronous else "ckpt"
        self.state, self.asynchronous = state, asynchronous
        self.root = os.path.join(base, self.name.replace(" ", "-") + "-root")
        self.mgr = ckpt.open(self.root)  # the first save creates it
        self.step = 0
        if asynchronous:
            self.load = None

    def before_save(self, path):
        for info in self.mgr.list() if self.step else ():
            self.mgr.delete(info.step)

    def save(self, path):
        self.step += 1
        if not self.asynchronous:
            self.mgr.save(self.step, self.state)
            return None
        return self.mgr.save_async(self.step, self.state).wait

    def files(self, path):
        return self.root

    def load(self, path):
        loaded = self.mgr.load(self.step, as_torch=True)
        touch(loaded)
        return loaded

    def check(self, loaded):
        same(self.state, loaded, self.name)

    def close(self):
        self.mgr.close()


class TorchSave:
    """torch.save of the nested dict into one file, fsynced; torch.load
    (weights_only, its default) reads it back."""

    name = "torch.save"

    def __init__(self, state, base):
        self.state = state

    def save(self, path):
        torch.save(self.state, path)
        fsync_tree(path)

    def load(self, path):
        loaded = torch.load(path)
        touch(loaded)
        return loaded

    def check(self, loaded):
        same(self.state, loaded, self.name)


class Safetensors:
    """safetensors.torch.save_file of the flattened state (it holds a flat
    dict of tensors), fsynced; load_file reads it back."""

    name = "safetensors"

    def __init__(self, state, base):
        from safetensors.torch import load_file, save_file
        self.state = state
        self.flat = dict(leaves(state))
        self._save, self._load = save_file, load_file

    def save(self, path):
        self._save(self.flat, path)
        fsync_tree(path)

    def load(self, path):
        loaded = unflatten(self._load(path))
        touch(loaded)
        return loaded

    def check(self, loaded):
        same(self.state, loaded, self.name)


class Dcp:
    """torch.distributed.checkpoint's save (or async_save) through
    FileSystemWriter in one process, no process group; load through
    FileSystemReader into tensors of the state's shapes, made before the
    timing (DCP loads in place, as a job's model and optimizer are)."""

    def __init__(self, state, base, asynchronous=False):
        import torch.distributed.checkpoint as dcp
        self.dcp = dcp
        self.name = "dcp async" if asynchronous else "dcp"
        self.state, self.asynchronous = state, asynchronous
        self.target = None
        if asynchronous:
            self.load = None

    def save(self, path):
        writer = self.dcp.FileSystemWriter(path)
        if not self.asynchronous:
            self.dcp.save(self.state, storage_writer=writer)
            fsync_tree(path)
            return None
        future = self.dcp.async_save(self.state, storage_writer=writer)

        def finish():
            future.result()
            fsync_tree(path)
        return finish

    def before_load(self, path):
        self.target = {
            "model": {k: torch.empty_like(v)
                      for k, v in self.state["model"].items()},
            "optim": {"state": {k: {m: torch.empty_like(t)
                                    for m, t in v.items()}
                                for k, v in self.state["optim"]["state"]
                                .items()},
                      "step": torch.empty_like(self.state["optim"]["step"])}}

    def load(self, path):
        target, self.target = self.target, None
        self.dcp.load(target, storage_reader=self.dcp.FileSystemReader(path))
        touch(target)
        return target

    def check(self, loaded):
        same(self.state, loaded, self.name)


_jax_arrays = []  # one copy of the state as JAX arrays, for every user


def jax_arrays(state):
    """The state as JAX arrays on the CPU, and their shapes and dtypes (a
    pytree of jax.ShapeDtypeStruct: what a job restores into)."""
    import jax
    if not _jax_arrays:
        arrays = jax.tree.map(torch_to_jax, state)
        jax.block_until_ready(arrays)
        abstract = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype,
                                           sharding=a.sharding), arrays)
        _jax_arrays.append((arrays, abstract))
    return _jax_arrays[0]


class CkptJax:
    """ckpt.jax.CheckpointManager, the Orbax-shaped API of ckpt, on the
    JAX arrays Orbax saves: save(step, arrays) with async_save=False, or
    the default asynchronous one (save() returns once the arrays are
    taken; wait_until_finished() to durable); restore(step, target=their
    shapes, dtypes and shardings). One manager for the run; the previous
    step is deleted before the timing."""

    def __init__(self, state, base, asynchronous=False):
        import jax
        import ckpt.jax
        self.jax = jax
        self.name = "ckpt.jax async" if asynchronous else "ckpt.jax"
        self.state, self.asynchronous = state, asynchronous
        self.arrays, self.abstract = jax_arrays(state)
        self.root = os.path.join(base, self.name.replace(" ", "-") + "-root")
        # create=None: the first save makes the root (no "new root" line).
        self.mgr = ckpt.jax.CheckpointManager(
            self.root, create=None, async_save=asynchronous)
        self.step = 0
        if asynchronous:
            self.load = None

    def before_save(self, path):
        for step in self.mgr.all_steps() if self.step else ():
            self.mgr.manager.delete(step)

    def save(self, path):
        self.step += 1
        self.mgr.save(self.step, self.arrays)
        return self.mgr.wait_until_finished if self.asynchronous else None

    def files(self, path):
        return self.root

    def load(self, path):
        loaded = self.mgr.restore(self.step, target=self.abstract)
        self.jax.block_until_ready(loaded)
        touch(loaded)
        return loaded

    def check(self, loaded):
        same(self.state, loaded, self.name)

    def close(self):
        self.mgr.close()


class Orbax:
    """Orbax's CheckpointManager (StandardSave / StandardRestore) of the
    same bytes as JAX arrays on the CPU, made once before the rounds:
    synchronous (enable_async_checkpointing=False), or asynchronous, whose
    save() returns once the arrays are taken and wait_until_finished() ends
    the save. A fresh manager per path, opened before the timing and closed
    after it; restore gets the arrays' shapes and dtypes (what a job
    restores into)."""

    def __init__(self, state, base, asynchronous=False):
        import jax
        import orbax.checkpoint as ocp
        self.ocp, self.jax = ocp, jax
        self.name = "orbax async" if asynchronous else "orbax"
        self.state, self.asynchronous = state, asynchronous
        self.arrays, self.abstract = jax_arrays(state)
        self.mgr = None
        if asynchronous:
            self.load = None

    def _manager(self, path):
        options = self.ocp.CheckpointManagerOptions(
            enable_async_checkpointing=self.asynchronous, create=True)
        return self.ocp.CheckpointManager(path, options=options)

    def before_save(self, path):
        self.mgr = self._manager(path)

    def save(self, path):
        self.mgr.save(1, args=self.ocp.args.StandardSave(self.arrays))
        if not self.asynchronous:
            fsync_tree(path)
            return None

        def finish():
            self.mgr.wait_until_finished()
            fsync_tree(path)
        return finish

    def after_save(self, path):
        self.mgr.close()
        self.mgr = None

    def before_load(self, path):
        self.mgr = self._manager(path)

    def load(self, path):
        loaded = self.mgr.restore(
            1, args=self.ocp.args.StandardRestore(self.abstract))
        self.jax.block_until_ready(loaded)
        touch(loaded)
        return loaded

    def after_load(self, path):
        self.after_save(path)

    def check(self, loaded):
        same(self.state, loaded, self.name)


_keras_model = []  # one model for both callbacks: it is most of the memory


def keras_model(state):
    """A built Keras model whose trainable variables are the state's model
    weights (the same dtypes, shapes and bytes) and whose Adam optimizer is
    built (two moments per weight, of its dtype, and an iteration count),
    with the moments filled from the state's. Keras's backend is
    $KERAS_BACKEND, jax unless set."""
    if _keras_model:
        return _keras_model[0]
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras
    import numpy as np

    class Weights(keras.layers.Layer):
        """Holds the weights; the model's output is its input."""

        def build(self, input_shape):
            for i, t in enumerate(state["model"].values()):
                dtype = str(t.dtype).replace("torch.", "")
                self.add_weight(shape=tuple(t.shape), dtype=dtype,
                                initializer="zeros", name=f"w{i}")

        def call(self, x):
            return x

    model = keras.Sequential([keras.Input(shape=(1,)), Weights()])
    model.compile(optimizer=keras.optimizers.Adam())
    model.optimizer.build(model.trainable_variables)

    def numpy_of(t):
        return np.asarray(torch_to_jax(t)) if t.dtype == torch.bfloat16 \
            else t.numpy()
    weights = list(state["model"].values())
    moments = list(state["optim"]["state"].values())
    for v, t in zip(model.trainable_variables, weights):
        v.assign(numpy_of(t))
    for v in model.optimizer.variables:
        # Adam's "<weight path>_momentum" / "_velocity": the state's moments
        # in the weight's dtype.
        for i, w in enumerate(model.trainable_variables):
            for suffix, key in (("momentum", "exp_avg"),
                                ("velocity", "exp_avg_sq")):
                if v.name.endswith(suffix) and tuple(v.shape) == \
                        tuple(w.shape) and w.name in v.path:
                    v.assign(numpy_of(moments[i][key].to(weights[i].dtype)))
    _keras_model.append(model)
    return model


def keras_values(model):
    import keras
    import numpy as np
    return [np.array(keras.ops.convert_to_numpy(v.value))
            for v in list(model.variables) + list(model.optimizer.variables)]


class Keras:
    """Keras 3's keras.callbacks.BackupAndRestore, or ckpt's
    ckpt.keras.BackupAndRestore (ours=True), on one built model (above):
    the backup is on_epoch_end (save_freq="epoch"), fsynced as the others
    for Keras's (its .weights.h5 and metadata file); the restore is a new
    callback's on_train_begin into the model, whose every variable is
    zeroed before the timing and checked after it."""

    def __init__(self, state, base, ours=False):
        os.environ.setdefault("KERAS_BACKEND", "jax")
        import keras
        self.model = keras_model(state)
        if ours:
            import ckpt.keras
            self.callback = ckpt.keras.BackupAndRestore
        else:
            self.callback = keras.callbacks.BackupAndRestore
        self.name = "ckpt.keras" if ours else "keras"
        self.ours, self.keras = ours, keras
        self.expected = keras_values(self.model)
        self.nbytes = sum(a.nbytes for a in self.expected)

    def _callback(self, path):
        cb = self.callback(path)
        cb.set_model(self.model)
        return cb

    def before_save(self, path):
        self.cb = self._callback(path)
        self.cb.on_train_begin()  # nothing there yet: nothing restored

    def save(self, path):
        self.cb.on_epoch_end(0)
        if not self.ours:
            fsync_tree(path)

    def before_load(self, path):
        for v in list(self.model.variables) + \
                list(self.model.optimizer.variables):
            v.assign(self.keras.ops.zeros(v.shape, v.dtype))

    def load(self, path):
        self._callback(path).on_train_begin()
        return keras_values(self.model)

    def check(self, loaded):
        for want, got in zip(self.expected, loaded):
            if want.dtype != got.dtype or want.shape != got.shape or \
                    want.tobytes() != got.tobytes():
                raise AssertionError(f"{self.name}: a variable differs")


# name -> factory(state, base); the order is the first round's.
FACTORIES = {
    "ckpt": lambda s, b: Ckpt(s, b),
    "ckpt async": lambda s, b: Ckpt(s, b, asynchronous=True),
    "torch.save": TorchSave,
    "safetensors": Safetensors,
    "dcp": lambda s, b: Dcp(s, b),
    "dcp async": lambda s, b: Dcp(s, b, asynchronous=True),
    "orbax": lambda s, b: Orbax(s, b),
    "orbax async": lambda s, b: Orbax(s, b, asynchronous=True),
    "ckpt.jax": lambda s, b: CkptJax(s, b),
    "ckpt.jax async": lambda s, b: CkptJax(s, b, asynchronous=True),
    "keras": lambda s, b: Keras(s, b),
    "ckpt.keras": lambda s, b: Keras(s, b, ours=True),
}
