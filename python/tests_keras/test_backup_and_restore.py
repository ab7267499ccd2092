"""ckpt.keras.BackupAndRestore on the real Keras 3, on the backend that
KERAS_BACKEND names (ctest runs this file as keras_test_jax and
keras_test_torch): a fit interrupted and started again ends with the very
values of one never interrupted."""

import os
import re
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest

import ckpt
import ckpt.keras

BACKEND = os.environ.get("KERAS_BACKEND")
JOB = os.path.join(os.path.dirname(__file__), "keras_job.py")
EPOCHS, BATCH, SAMPLES = 3, 8, 64  # 8 batches an epoch, 24 in all


def test_keras_runs_the_backend_that_ctest_names():
    assert BACKEND in ("jax", "torch"), \
        "ctest sets KERAS_BACKEND=jax or torch for this suite"
    assert keras.backend.backend() == BACKEND


def make_model(seed=1, hidden=5, name="h", dtype=None):
    # Named layers: this process builds several models, and Keras numbers
    # unnamed layers per process (dense, dense_1, ...).
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [keras.Input((4,)),
         keras.layers.Dense(hidden, activation="tanh", name=name,
                            dtype=dtype),
         keras.layers.Dense(1, name="out")], name="m")
    model.compile(optimizer=keras.optimizers.Adam(1e-2, name="adam"),
                  loss="mse", metrics=["mae"])
    return model


def data():
    x = np.linspace(-1, 1, SAMPLES * 4, dtype="float32").reshape(SAMPLES, 4)
    return x, np.cos(3 * x).sum(axis=1, keepdims=True)


def fit(model, callbacks, epochs=EPOCHS):
    x, y = data()
    return model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False,
                     verbose=0, callbacks=callbacks)


def values(model):
    return {f"{group}/{v.path}": keras.ops.convert_to_numpy(v.value)
            for group, vs in (("model", model.variables),
                              ("optimizer", model.optimizer.variables))
            for v in vs}


def assert_bit_identical(a, b):
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert a[name].tobytes() == b[name].tobytes(), name


class Crash(Exception):
    pass


class Interrupt(keras.callbacks.Callback):
    """Raises after batch `batch` of epoch `epoch`, as a crash would."""

    def __init__(self, epoch, batch):
        super().__init__()
        self.at, self.epoch = (epoch, batch), None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            raise Crash(f"interrupted after batch {batch}")


@pytest.fixture(scope="module")
def reference():
    model = make_model()
    history = fit(model, [])
    return values(model), history.history


def left_in(root):
    return sorted(os.listdir(root))


@pytest.mark.parametrize("save_freq,at", [
    ("epoch", (1, 4)),  # mid-epoch: epoch 1 runs again from its start
    (3, (1, 4)),        # the backup after batch 3 of epoch 1
    (3, (2, 7)),        # the backup after fit's last batch: epoch 2 again
    (8, (2, 0)),        # backups after each epoch's last batch: epoch 1
])
def test_an_interrupted_fit_ends_bit_identical(tmp_path, reference, save_freq,
                                               at):
    root = str(tmp_path / "backup")
    first = make_model()
    with pytest.raises(Crash):
        fit(first, [ckpt.keras.BackupAndRestore(root, save_freq=save_freq),
                    Interrupt(*at)])
    newest = ckpt.open(root).list()[-1]
    # The step is the number of batches trained when it was taken.
    expected = at[0] * 8 if save_freq == "epoch" else \
        (at[0] * 8 + at[1] + 1) // save_freq * save_freq
    assert newest.step == expected

    second = make_model(seed=2)  # other initial weights: all are restored
    history = fit(second, [ckpt.keras.BackupAndRestore(root,
                                                       save_freq=save_freq)])
    want, want_history = reference
    assert_bit_identical(values(second), want)
    # Epochs before the backup's are not run again; the rest log what the
    # uninterrupted fit logged, the epoch the backup was taken in included.
    start = at[0] if save_freq == "epoch" else (expected - 1) // 8
    assert history.epoch == list(range(start, EPOCHS))
    assert history.history["loss"] == want_history["loss"][start:]
    assert history.history["mae"] == want_history["mae"][start:]
    # The backups are deleted; the root keeps its lease records alone.
    assert all(name.startswith("LEASE-") for name in left_in(root)), \
        left_in(root)


def test_interrupted_again_while_the_epoch_runs_again(tmp_path, reference):
    """The batches run again before a mid-epoch backup's are backed up by
    no one: a second interruption there leaves the backup as it was."""
    root = str(tmp_path / "backup")
    with pytest.raises(Crash):
        fit(make_model(), [ckpt.keras.BackupAndRestore(root, save_freq=2),
                           Interrupt(1, 6)])
    assert ckpt.open(root).latest() == 14  # after batch 5 of epoch 1
    with pytest.raises(Crash):
        fit(make_model(seed=2), [ckpt.keras.BackupAndRestore(root,
                                                             save_freq=2),
                                 Interrupt(1, 4)])
    assert [i.step for i in ckpt.open(root).list()] == [14]
    last = make_model(seed=3)
    fit(last, [ckpt.keras.BackupAndRestore(root, save_freq=2)])
    assert_bit_identical(values(last), reference[0])


def test_a_killed_process_resumes_bit_identical(tmp_path):
    """SIGKILL in the middle of an epoch, then the same program again: a
    fresh process, default layer names, as a preempted job."""
    env = dict(os.environ)

    def run(*args, rc=0):
        done = subprocess.run([sys.executable, JOB, *args], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == rc, done.stderr[-3000:]

    root = str(tmp_path / "backup")
    run("--out", str(tmp_path / "x.npz"), "--root", root, "--save-freq", "4",
        "--kill-at", "1:6", rc=-signal.SIGKILL)
    # 10 batches an epoch: the backup after batch 5 of epoch 1 (the 16th);
    # batch 6, the last one run, is in none.
    assert ckpt.open(root).latest() == 16
    run("--out", str(tmp_path / "resumed.npz"), "--root", root,
        "--save-freq", "4")
    resumed = np.load(tmp_path / "resumed.npz")
    sys.path.insert(0, os.path.dirname(JOB))
    try:
        import keras_job
    finally:
        sys.path.remove(os.path.dirname(JOB))
    ref = keras_job.train()  # the same fit, never interrupted, no backups
    assert len(ref) == len(resumed.files) == 4 + 2 + 8
    for i, value in enumerate(ref):
        assert value.tobytes() == resumed[f"arr_{i}"].tobytes(), i


def test_delete_checkpoint_false_keeps_the_last_backup(tmp_path, reference):
    root = str(tmp_path / "backup")
    model = make_model()
    fit(model, [ckpt.keras.BackupAndRestore(root, delete_checkpoint=False)])
    infos = ckpt.open(root).list()
    assert [(i.step, i.epoch) for i in infos] == [(24, 2)]  # keep_last=1
    entries = {e.name for e in ckpt.open(root).describe(24).entries}
    # Entries are named by variable path, whatever the backend.
    assert {"model.m/h/kernel", "model.m/out/bias",
            "optimizer.adam/iteration", "optimizer.adam/m_h_kernel_momentum",
            "metrics.loss/total", "keras"} <= entries, sorted(entries)
    # A later fit of the same callback's root starts at the end: no epoch.
    again = make_model(seed=3)
    history = fit(again, [ckpt.keras.BackupAndRestore(
        root, delete_checkpoint=False)])
    assert history.epoch == []
    assert_bit_identical(values(again), reference[0])
    assert again._initial_epoch is None  # a later plain fit starts at 0


def test_double_checkpoint_keeps_two(tmp_path):
    root = str(tmp_path / "backup")
    fit(make_model(), [ckpt.keras.BackupAndRestore(
        root, double_checkpoint=True, delete_checkpoint=False)])
    assert [i.step for i in ckpt.open(root).list()] == [16, 24]


def test_bfloat16_is_restored_bit_for_bit(tmp_path):
    root = str(tmp_path / "backup")
    model = make_model(dtype="bfloat16")
    fit(model, [ckpt.keras.BackupAndRestore(root, delete_checkpoint=False)],
        epochs=1)
    saved = values(model)
    assert saved["model/m/h/kernel"].dtype.name == "bfloat16"
    stored = {e.name: e.dtype for e in ckpt.open(root).describe(8).entries}
    assert stored["model.m/h/kernel"] == "BF16"
    assert stored["optimizer.adam/m_h_kernel_velocity"] == "BF16"
    other = make_model(seed=5, dtype="bfloat16")
    assert values(other)["model/m/h/kernel"].tobytes() != \
        saved["model/m/h/kernel"].tobytes()
    fit(other, [ckpt.keras.BackupAndRestore(root)], epochs=1)  # runs none
    assert_bit_identical(values(other), saved)


class Float8(keras.layers.Layer):
    """Float8 state (as float8 training keeps), a 0-d one too, that each
    training batch changes."""

    def build(self, input_shape):
        self.e4m3 = self.add_weight(shape=(3,), dtype="float8_e4m3fn",
                                    initializer="ones", trainable=False,
                                    name="e4m3")
        self.e5m2 = self.add_weight(shape=(), dtype="float8_e5m2",
                                    initializer="ones", trainable=False,
                                    name="e5m2")

    def call(self, x, training=False):
        if training:
            for v in (self.e4m3, self.e5m2):
                v.assign(keras.ops.cast(
                    keras.ops.cast(v.value, "float32") * 1.25, v.dtype))
        return x


def float8_bits(model):
    """The float8 variables' bits: torch hands no float8 tensor to NumPy."""
    def bits(value):
        if BACKEND == "torch":
            import torch
            return value.detach().cpu().view(torch.uint8).numpy().tobytes()
        return keras.ops.convert_to_numpy(value).tobytes()
    return {v.path.split("/")[-1]: bits(v.value)
            for v in model.variables if "float8" in v.dtype}


def test_float8_variables_are_restored_bit_for_bit(tmp_path):
    """On torch, backing up a float8 variable raised TypeError (torch's
    .numpy() has no float8), and restoring one could not assign it."""
    def make(seed):
        keras.utils.set_random_seed(seed)
        model = keras.Sequential([keras.Input((4,)), Float8(name="f8"),
                                  keras.layers.Dense(1, name="out")],
                                 name="m")
        model.compile(optimizer="adam", loss="mse")
        return model
    root = str(tmp_path / "backup")
    model = make(1)
    fit(model, [ckpt.keras.BackupAndRestore(root, delete_checkpoint=False)],
        epochs=1)
    stored = {e.name: e.dtype for e in ckpt.open(root).describe(8).entries}
    assert stored["model.m/f8/e4m3"] == "F8_E4M3"
    assert stored["model.m/f8/e5m2"] == "F8_E5M2"
    saved = float8_bits(model)
    other = make(2)
    assert float8_bits(other) != saved
    fit(other, [ckpt.keras.BackupAndRestore(root)], epochs=1)  # runs none
    assert float8_bits(other) == saved


@pytest.mark.parametrize("change,why", [
    (dict(hidden=6), "float32 [5] in the backup and float32 [6] in the model"),
    (dict(name="hidden"), "names no variable of the model"),
    (dict(dtype="float16"), "float32 [5] in the backup and float16 [5]"),
])
def test_a_backup_of_another_model_is_a_clear_error(tmp_path, change, why):
    root = str(tmp_path / "backup")
    fit(make_model(), [ckpt.keras.BackupAndRestore(
        root, delete_checkpoint=False)], epochs=1)
    other = make_model(seed=9, **change)
    other.optimizer.build(other.trainable_variables)  # as fit would
    before = values(other)
    with pytest.raises(ckpt.InvalidArgument) as e:
        fit(other, [ckpt.keras.BackupAndRestore(root)])
    message = str(e.value)
    assert f"restore {root} (step 8): entry 'model.m/h/bias'" in message \
        and why in message and "nothing was restored" in message, message
    assert_bit_identical(values(other), before)
    assert other._initial_epoch is None
    assert ckpt.open(root).latest() == 8  # the backup is left as it was


def test_bad_arguments_and_an_unbuilt_model(tmp_path):
    for freq in (0, -2, True, "batch", 1.5):
        with pytest.raises(ckpt.InvalidArgument, match="save_freq"):
            ckpt.keras.BackupAndRestore(str(tmp_path), save_freq=freq)
    with pytest.raises(ckpt.InvalidArgument, match="empty url"):
        ckpt.keras.BackupAndRestore("")
    with pytest.raises(ckpt.InvalidArgument, match="keep_best"):
        ckpt.keras.BackupAndRestore(str(tmp_path), keep_best=2)
    # A misspelled keyword is told here, not at fit's start.
    with pytest.raises(TypeError, match="'dubble_checkpoint'.*did you mean "
                                        "'double_checkpoint'"):
        ckpt.keras.BackupAndRestore(str(tmp_path), dubble_checkpoint=True)
    # Keras's keyword for the root, so that only the class changes.
    assert ckpt.keras.BackupAndRestore(backup_dir=str(tmp_path)).url == \
        str(tmp_path)
    with pytest.raises(ckpt.InvalidArgument, match="both url and backup_dir"):
        ckpt.keras.BackupAndRestore(str(tmp_path), backup_dir=str(tmp_path))
    with pytest.raises(ckpt.InvalidArgument, match="empty url"):
        ckpt.keras.BackupAndRestore()
    callback = ckpt.keras.BackupAndRestore(str(tmp_path / "b"))
    callback.set_model(keras.Sequential([keras.layers.Dense(2)]))
    with pytest.raises(ValueError, match="not built"):
        callback.on_train_begin()


def test_a_model_built_again_in_one_process_is_restored(tmp_path):
    # Unnamed layers, a seeded Dropout and an unnamed optimizer: each build
    # in this process gets new numbers (dense_4, seed_generator_2, adam_3).
    def build():
        keras.utils.set_random_seed(3)
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(5, activation="tanh"),
             keras.layers.Dropout(0.2, seed=1), keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")
        return model

    uninterrupted = build()
    fit(uninterrupted, [])
    root = str(tmp_path / "again")
    first = build()
    with pytest.raises(Crash):
        fit(first, [ckpt.keras.BackupAndRestore(root), Interrupt(1, 4)])
    second = build()
    assert {v.path for v in second.variables} != \
        {v.path for v in first.variables}
    fit(second, [ckpt.keras.BackupAndRestore(root)])
    a, b = values(uninterrupted), values(second)
    assert [x.tobytes() for x in a.values()] == \
        [x.tobytes() for x in b.values()]

    # A model that differs in more than those numbers is still refused.
    with pytest.raises(Crash):
        fit(build(), [ckpt.keras.BackupAndRestore(root), Interrupt(1, 4)])
    keras.utils.set_random_seed(3)
    other = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5),
                              keras.layers.Dense(1, name="other")])
    other.compile(optimizer="adam", loss="mse")
    with pytest.raises(ckpt.InvalidArgument, match="nothing was restored"):
        fit(other, [ckpt.keras.BackupAndRestore(root)])
    # One matched by position whose shapes differ: the error names the
    # backup's entry, as `ckpt show` lists it, and the model's variable.
    keras.utils.set_random_seed(3)
    wider = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(6, activation="tanh"),
         keras.layers.Dropout(0.2, seed=1), keras.layers.Dense(1)])
    wider.compile(optimizer="adam", loss="mse")
    with pytest.raises(ckpt.InvalidArgument) as e:
        fit(wider, [ckpt.keras.BackupAndRestore(root)])
    stored = {x.name for x in ckpt.open(root).describe(
        ckpt.open(root).latest()).entries}
    named = re.search(r"entry '([^']*)' \(matched by position to the "
                      r"model's variable '([^']*)'\) is float32 \[[^]]*5"
                      r"[^]]*\] in the backup and float32 \[[^]]*6[^]]*\] in "
                      r"the model",
                      str(e.value))
    assert named, str(e.value)
    assert named.group(1) in stored, (named.group(1), sorted(stored))
    assert named.group(2) in {"model/" + v.path for v in wider.variables}


def test_another_checkpoint_in_the_root_is_refused(tmp_path):
    root = str(tmp_path / "other")
    ckpt.open(root).save(1, {"w": np.zeros(3, np.float32)})
    with pytest.raises(ckpt.InvalidArgument,
                       match="not a backup of ckpt.keras"):
        fit(make_model(), [ckpt.keras.BackupAndRestore(root)])


def test_ckpt_imports_without_keras():
    """The core never imports Keras; ckpt.keras says what it needs."""
    code = ("import sys\n"
            "class NoKeras:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'keras':\n"
            "            raise ImportError('no keras here')\n"
            "sys.meta_path.insert(0, NoKeras())\n"
            "import ckpt\n"
            "assert 'keras' not in sys.modules\n"
            "try:\n"
            "    import ckpt.keras\n"
            "except ImportError as e:\n"
            "    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "ckpt.keras needs Keras 3" in done.stdout


@pytest.mark.skipif(BACKEND != "jax", reason="Keras's torch backend needs "
                    "torch; keras_test_jax runs this")
def test_bfloat16_without_torch(tmp_path):
    """On JAX without torch, BF16 entries load as their bits (the core's
    fallback), and the restore views them as bfloat16 again."""
    code = f"""
import sys, warnings
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'torch':
            raise ImportError('no torch here')
sys.meta_path.insert(0, NoTorch())
warnings.simplefilter('error', RuntimeWarning)
sys.path.insert(0, {os.path.dirname(__file__)!r})
import keras, ckpt.keras
from test_backup_and_restore import fit, make_model, values
root = {str(tmp_path / "backup")!r}
model = make_model(dtype="bfloat16")
fit(model, [ckpt.keras.BackupAndRestore(root, delete_checkpoint=False)],
    epochs=1)
other = make_model(seed=5, dtype="bfloat16")
fit(other, [ckpt.keras.BackupAndRestore(root)], epochs=1)
a, b = values(model), values(other)
assert 'torch' not in sys.modules
assert all(a[k].tobytes() == b[k].tobytes() for k in a) and len(a) == 4 + 10
print('restored', a['model/m/h/kernel'].dtype)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "restored bfloat16" in done.stdout


def test_a_backup_with_a_seed_generator_restores_on_the_other_backend(
        tmp_path):
    """A Dropout with a seed keeps its state in a seed generator: uint32
    on JAX, int32 on torch. A backup taken here goes on on the other
    backend, the seed's bits as they were."""
    other = {"jax": "torch", "torch": "jax"}[BACKEND]
    root = str(tmp_path / "backup")
    code = f"""
import sys
import keras, numpy as np, ckpt.keras
def make():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(5, name="h"),
         keras.layers.Dropout(0.3, seed=3, name="drop"),
         keras.layers.Dense(1, name="out")], name="m")
    model.compile(optimizer="adam", loss="mse")
    return model
class Seen(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if not hasattr(self, "bits"):
            seed = [v for v in self.model.variables
                    if v.path.endswith("seed_generator_state")][0]
            self.bits = keras.ops.convert_to_numpy(seed.value).tobytes().hex()
class Stop(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if sys.argv[1] == "first" and epoch == 1:
            self.model.stop_training = True
x = np.linspace(-1, 1, 64 * 4, dtype="float32").reshape(64, 4)
seen = Seen()
model = make()
history = model.fit(x, x.sum(1, keepdims=True), batch_size=8, epochs=4,
                    verbose=0, callbacks=[ckpt.keras.BackupAndRestore(
                        {root!r}, delete_checkpoint=False), Stop(), seen])
seed = [v for v in model.variables
        if v.path.endswith("seed_generator_state")][0]
print(keras.backend.backend(), history.epoch, seen.bits,
      keras.ops.convert_to_numpy(seed.value).tobytes().hex())
"""

    def run(backend, which):
        env = dict(os.environ, KERAS_BACKEND=backend)
        done = subprocess.run([sys.executable, "-c", code, which], env=env,
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.split()

    # Two epochs here (stopped, as a preemption would), then the rest there.
    name, _, _, _, at_stop = run(BACKEND, "first")[:5]
    assert name == BACKEND
    words = run(other, "second")
    assert words[0] == other
    assert "".join(words[1:-2]) == "[2,3]"  # went on after epoch 1's backup
    assert words[-2] == at_stop  # the seed's bits, as the backup held them
