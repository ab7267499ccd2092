"""ckpt.lightning: Lightning's Trainer saving and resuming through ckpt.

A small model trained on the CPU, deterministic: an uninterrupted fit of 4
epochs against fits stopped after 2 epochs, or killed in the middle of the
third (os._exit in a child process), and resumed with ckpt_path="last";
save_top_k's removals as ckpt deletes; values that ckpt holds only through
a record of their types or as torch.save bytes. With a CUDA device, the
same resume on the GPU, and CUDA tensors that load back on their device
(skipped, with a warning, without one). CKPT_CLI (the ckpt binary; ctest
sets it) runs `ckpt verify` on the roots.
"""

import collections
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import warnings

import pytest

import ckpt
from torchrun_util import skip_module

try:
    import lightning as L
    import numpy as np
    import torch
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint
except ImportError as e:
    skip_module("test_lightning.py", f"Lightning is not importable ({e})")

import ckpt.lightning  # noqa: E402 - after the skip

EPOCHS, BATCHES = 4, 4
SCORES = [3.0, 1.0, 4.0, 0.5, 5.0]  # val "score" per epoch: not monotonic


class Net(L.LightningModule):
    def __init__(self, lr=0.05, note="mlp"):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16),
                                       torch.nn.Tanh(), torch.nn.Linear(16, 1))
        self.steps_run = 0

    def training_step(self, batch, batch_idx):
        self.steps_run += 1
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))
        self.log("score", SCORES[self.current_epoch % len(SCORES)])

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.8)]


def loaders():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(BATCHES * 8, 4, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sin().sum(1, keepdim=True))
    return (torch.utils.data.DataLoader(data, batch_size=8),
            torch.utils.data.DataLoader(data, batch_size=16))


class Die(Callback):
    """Ends the process in the middle of an epoch, as a kill would."""

    def __init__(self, epoch):
        self.epoch = epoch

    def on_train_batch_end(self, trainer, *args):
        if trainer.current_epoch == self.epoch and \
                trainer.fit_loop.epoch_loop.batch_idx == 1:
            os._exit(17)


def fit(dirpath, epochs, *, resume=None, plugin=None, top_k=-1,
        callbacks=(), accelerator="cpu"):
    """(model, trainer) of one fit; plugin None: ckpt.lightning's."""
    L.seed_everything(0, verbose=False)
    model = Net()
    checkpoints = ModelCheckpoint(dirpath=dirpath, save_last=True,
                                  save_top_k=top_k, monitor="score")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*(num_workers|not empty|LeafSpec|"
                                          "litlogger|GPU available).*")
        trainer = L.Trainer(
            max_epochs=epochs, accelerator=accelerator, devices=1,
            deterministic=True, logger=False, enable_progress_bar=False,
            enable_model_summary=False,
            plugins=[plugin or ckpt.lightning.CheckpointIO()],
            callbacks=[checkpoints, *callbacks])
        trainer.fit(model, *loaders(), ckpt_path=resume)
    return model, trainer


def assert_same(a, b, where="checkpoint"):
    """a and b alike, types and bits: tensors by dtype, shape and bytes."""
    assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
    if isinstance(a, torch.Tensor):
        assert (a.dtype, a.shape, a.device, a.requires_grad) == \
            (b.dtype, b.shape, b.device, b.requires_grad), where
        if a.dtype.is_complex:
            a, b = torch.view_as_real(a), torch.view_as_real(b)
        assert torch.equal(a.detach(), b.detach()), where
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
        assert getattr(a, "_metadata", None) == getattr(b, "_metadata",
                                                        None), where
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), where
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def assert_resumed_alike(reference, resumed):
    (model, trainer), (model2, trainer2) = reference, resumed
    assert_same(model.state_dict(), model2.state_dict(), "weights")
    assert_same(trainer.optimizers[0].state_dict(),
                trainer2.optimizers[0].state_dict(), "optimizer")
    assert_same(trainer.lr_scheduler_configs[0].scheduler.state_dict(),
                trainer2.lr_scheduler_configs[0].scheduler.state_dict(),
                "lr scheduler")
    assert (trainer2.global_step, trainer2.current_epoch) == \
        (trainer.global_step, trainer.current_epoch) == \
        (EPOCHS * BATCHES, EPOCHS)


def verify(root):
    exe = os.environ.get("CKPT_CLI")
    if not exe:
        warnings.warn(pytest.PytestWarning(
            "test_lightning.py: CKPT_CLI is not set (the ckpt binary; ctest "
            "sets it): `ckpt verify` is not run"))
        return
    run = subprocess.run([exe, "verify", str(root), "--all"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


def pointers(dirpath):
    """{file name: step} of the ckpt.lightning pointers in dirpath."""
    out = {}
    for name in os.listdir(dirpath):
        if name.endswith(".ckpt"):
            with open(os.path.join(dirpath, name)) as f:
                out[name] = json.load(f)["step"]
    return out


@pytest.fixture(scope="module", autouse=True)
def restore_torch_settings():
    """Trainer(deterministic=True) and seed_everything change settings of
    the whole process; the tests after these get them back."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    environ = dict(os.environ)
    yield
    torch.use_deterministic_algorithms(deterministic)
    os.environ.clear()
    os.environ.update(environ)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return fit(tmp_path_factory.mktemp("reference"), EPOCHS)


@pytest.mark.parametrize("asynchronous", [False, True],
                         ids=["sync", "async"])
def test_stopped_fit_resumes_bit_identical(reference, tmp_path,
                                           asynchronous):
    def plugin():
        return ckpt.lightning.CheckpointIO(asynchronous=asynchronous)

    fit(tmp_path, 2, plugin=plugin())
    assert pointers(tmp_path)["last.ckpt"] == 2 * BATCHES + 1  # beside 8
    resumed = fit(tmp_path, EPOCHS, resume="last", plugin=plugin())
    assert resumed[0].steps_run == (EPOCHS - 2) * BATCHES  # not from 0
    assert_resumed_alike(reference, resumed)
    verify(tmp_path)


def test_killed_fit_resumes_bit_identical(reference, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(ckpt.__file__)),
         os.path.dirname(__file__)]), OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, __file__, "die", str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 17, run.stdout + run.stderr
    # Epoch 1's saves may have been in flight when it died: last.ckpt then
    # names epoch 0's (each epoch saves epoch=E-step=S.ckpt as step S, then
    # last.ckpt as step S + 1).
    last = pointers(tmp_path)["last.ckpt"]
    assert last in (BATCHES + 1, 2 * BATCHES + 1)
    resumed = fit(tmp_path, EPOCHS, resume="last")
    assert resumed[0].steps_run == EPOCHS * BATCHES - (last - 1)
    assert_resumed_alike(reference, resumed)
    # What the killed save left (a step no file names) has been deleted.
    assert sorted(i.step for i in ckpt.open(tmp_path).list()) == \
        sorted(pointers(tmp_path).values())
    verify(tmp_path)


class Recording(ckpt.lightning.CheckpointIO):
    """Keeps a copy of the newest dict saved at each path."""

    def __init__(self):
        super().__init__()
        self.saved = {}

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        self.saved[os.path.basename(path)] = copy.deepcopy(checkpoint)
        super().save_checkpoint(checkpoint, path, storage_options)


def test_top_k_removals_are_ckpt_deletes(tmp_path):
    plugin = Recording()
    fit(tmp_path, len(SCORES), plugin=plugin, top_k=2)
    # Epochs 2 and 4 made no top 2 (no save); epoch 3 (0.5) pushed epoch 0
    # (3.0) out, so the best two are epochs 1 and 3, and last.ckpt was saved
    # with epoch 3's file.
    files = pointers(tmp_path)
    assert sorted(files) == ["epoch=1-step=8.ckpt", "epoch=3-step=16.ckpt",
                             "last.ckpt"]
    assert files == {"epoch=1-step=8.ckpt": 8, "epoch=3-step=16.ckpt": 16,
                     "last.ckpt": 17}
    infos = ckpt.open(tmp_path).list()
    # Step 4 (epoch 0's file) is gone, and so are 5 and 9, the steps of
    # the earlier last.ckpt; last.ckpt is an incremental save over step 16.
    assert [i.step for i in infos] == [8, 16, 17]
    assert {i.step: i.metadata["lightning_file"] for i in infos} == \
        {step: name for name, step in files.items()}
    assert infos[-1].depends_on == [16] and infos[-1].bytes < \
        infos[-2].bytes
    for name in files:  # each file loads as the dict saved there
        assert_same(plugin.saved[name], plugin.load_checkpoint(
            os.path.join(tmp_path, name)))
    plugin.teardown()
    verify(tmp_path)


def test_values_round_trip_exactly(tmp_path):
    weights = collections.OrderedDict(w=torch.randn(3, 2),
                                      b=torch.randn(3).t())
    weights._metadata = collections.OrderedDict([("", {"version": 1})])
    checkpoint = {
        "state_dict": weights, "global_step": 3, "epoch": 0,
        "dotted": {"a.b": 1, "a": {"b": 2}},  # both would name "a.b"
        "paths": {"/tmp/run/epoch=0.ckpt": torch.tensor(0.5), "": 3,
                  1: "int key", "1": "str key", ("t", 1): 5, True: 6,
                  2 ** 70: 7, "a\nb": 8, "a\\b": 9},
        "bf16": torch.randn(4).to(torch.bfloat16),
        "complex": torch.randn(2, dtype=torch.complex64),
        "uint16": torch.tensor([1, 2], dtype=torch.uint16),
        "floats": [float("nan"), -math.inf, -0.0, 1e-310], "big": 2 ** 80,
        "safe": [{1, 2}, torch.Size([2, 3]), torch.float16, 1 + 2j],
        "bytes": [b"\0\1", bytearray(b"xy")], "none": None,
        "tuples": (1, (2.5, "s"), [], {}), "lone surrogate": "x\udc80",
        "numpy": [np.arange(4, dtype=np.int16), np.float32(2.5),
                  np.arange(3, dtype=np.uint32)],
        "parameter": torch.nn.Parameter(torch.ones(2)),
        "grad": torch.ones(2, requires_grad=True),
        "view": torch.arange(6.0).reshape(2, 3).t(), "empty": torch.ones(0, 3),
        "ordered": collections.OrderedDict(b=1, a=2),
    }
    for asynchronous in (False, True):
        plugin = ckpt.lightning.CheckpointIO(asynchronous=asynchronous)
        path = tmp_path / str(asynchronous) / "x.ckpt"
        plugin.save_checkpoint(checkpoint, path)
        assert_same(checkpoint, plugin.load_checkpoint(path))
        plugin.teardown()
        verify(path.parent)


def test_map_location_and_other_files(tmp_path):
    plugin = ckpt.lightning.CheckpointIO()
    state = {"w": torch.ones(2), "p": torch.nn.Parameter(torch.zeros(1)),
             "s": torch.Size([1])}
    plugin.save_checkpoint(state, tmp_path / "a.ckpt")
    meta = plugin.load_checkpoint(tmp_path / "a.ckpt", map_location="meta")
    assert meta["w"].device.type == "meta" and meta["p"].is_meta
    seen = []
    plugin.load_checkpoint(tmp_path / "a.ckpt", map_location=lambda s, loc:
                           seen.append(loc))
    assert seen == ["cpu", "cpu"]
    moved = plugin.load_checkpoint(tmp_path / "a.ckpt",
                                   map_location={"cpu": "meta"})
    assert moved["w"].is_meta
    # A torch.save file (saved before ckpt) loads as Lightning's would.
    torch.save({"w": torch.ones(2)}, tmp_path / "old.ckpt")
    assert torch.equal(plugin.load_checkpoint(tmp_path / "old.ckpt")["w"],
                       torch.ones(2))
    with pytest.raises(FileNotFoundError, match="missing.ckpt"):
        plugin.load_checkpoint(tmp_path / "missing.ckpt")
    # A pointer copied away from its root (an "export" by cp) says what it
    # is and how to copy the weights out.
    os.makedirs(tmp_path / "export")
    shutil.copy(tmp_path / "a.ckpt", tmp_path / "export" / "best.ckpt")
    with pytest.raises(ckpt.NotFound,
                       match=r"best.ckpt: this file is a ckpt pointer to "
                             r"step \d+ of .*export \(the folder it lies "
                             r"in\).*ckpt export ROOT"):
        plugin.load_checkpoint(tmp_path / "export" / "best.ckpt")
    plugin.remove_checkpoint(tmp_path / "a.ckpt")
    assert ckpt.open(tmp_path).list() == []
    plugin.teardown()


def test_a_step_goes_once_no_file_and_no_kept_step_needs_it(tmp_path):
    mgr = ckpt.open(tmp_path)
    # A step whose pointer a killed run never wrote, and one of another
    # program's, which ckpt.lightning leaves alone.
    mgr.save(5, {"w": np.ones(2)}, metadata={"lightning_file": "b.ckpt"})
    mgr.save(6, {"w": np.ones(2)})
    del mgr  # gives the root's lease back
    plugin = ckpt.lightning.CheckpointIO()
    state = {"w": torch.arange(1000.0), "global_step": 10}
    plugin.save_checkpoint(state, tmp_path / "a.ckpt")
    plugin.save_checkpoint(state, tmp_path / "last.ckpt")  # over step 10
    assert pointers(tmp_path) == {"a.ckpt": 10, "last.ckpt": 11}
    plugin.remove_checkpoint(tmp_path / "a.ckpt")
    mgr = ckpt.open(tmp_path)
    assert [(i.step, i.depends_on) for i in mgr.list()] == [
        (6, []), (10, []), (11, [10])]
    assert_same(plugin.load_checkpoint(tmp_path / "last.ckpt"), state)
    plugin.save_checkpoint(state | {"global_step": 20},
                           tmp_path / "last.ckpt")  # replaces it
    assert [i.step for i in mgr.list()] == [6, 20]
    plugin.teardown()
    verify(tmp_path)


def test_an_asynchronous_failure_is_raised_by_the_next_call(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    plugin = ckpt.lightning.CheckpointIO(asynchronous=True)
    state = {"w": torch.ones(2), "global_step": 1}
    plugin.save_checkpoint(state, tmp_path / "file" / "a.ckpt")  # returns
    with pytest.raises(ckpt.InvalidArgument, match="not a directory"):
        plugin.wait()
    plugin.save_checkpoint(state, tmp_path / "file" / "a.ckpt")
    with pytest.raises(ckpt.InvalidArgument, match="not a directory"):
        plugin.teardown()
    plugin.save_checkpoint(state, tmp_path / "ok" / "a.ckpt")  # raised once
    plugin.teardown()
    assert_same(plugin.load_checkpoint(tmp_path / "ok" / "a.ckpt"), state)


def test_plugins_of_one_process_share_its_managers(tmp_path):
    # Fabric never calls teardown(): its plug-in kept its manager of the
    # root, with the lease, and the plug-in of a second Fabric (a script
    # run again in one process, a notebook cell) waited lease_wait_seconds
    # for it, then failed.
    from lightning.fabric import Fabric
    path = str(tmp_path / "c.ckpt")
    fabrics = []  # every one of them alive, as in a notebook
    for step in (1, 2, 3):
        plugin = ckpt.lightning.CheckpointIO(lease_wait_seconds=0)
        fabrics.append(Fabric(accelerator="cpu", devices=1,
                              plugins=[plugin]))
        model = fabrics[-1].setup_module(torch.nn.Linear(2, 1))
        if step > 1:
            state = {"model": model, "step": 0}
            fabrics[-1].load(path, state)
            assert state["step"] == step - 1
        fabrics[-1].save(path, {"model": model, "step": step})
    assert ckpt.lightning.load(path)["step"] == 3
    # One torn down closes nothing the others use; the last one closes it,
    # giving the lease back to another manager.
    for fabric in fabrics:
        fabric.strategy.checkpoint_io.teardown()
    with ckpt.open(tmp_path, lease_wait_seconds=0) as mgr:
        mgr.save(100, {"w": np.ones(2)})
    # A plug-in of other options, while one is in use, has its own.
    first = ckpt.lightning.CheckpointIO()
    first.save_checkpoint({"w": torch.ones(2)}, tmp_path / "d.ckpt")
    other = ckpt.lightning.CheckpointIO(chunk_size=1 << 16)
    assert other.load_checkpoint(tmp_path / "d.ckpt")["w"].tolist() == \
        [1.0, 1.0]
    other.teardown()
    first.save_checkpoint({"w": torch.zeros(2)}, tmp_path / "d.ckpt")
    first.teardown()


@pytest.fixture
def cuda():
    if not torch.cuda.is_available():
        why = "no CUDA device: the CUDA tensor and GPU fit tests are skipped"
        warnings.warn(pytest.PytestWarning(f"test_lightning.py: {why}"))
        pytest.skip(why)


def test_cuda_tensors_keep_their_device(cuda, tmp_path):
    state = {"w": torch.randn(3, device="cuda"), "cpu": torch.ones(1),
             "p": torch.nn.Parameter(torch.ones(2, device="cuda")),
             "global_step": 1}
    for asynchronous in (False, True):
        plugin = ckpt.lightning.CheckpointIO(asynchronous=asynchronous)
        path = tmp_path / str(asynchronous) / "x.ckpt"
        plugin.save_checkpoint(state, path)
        assert_same(state, plugin.load_checkpoint(path, map_location=None))
        on_cpu = plugin.load_checkpoint(path)  # Lightning's default
        assert on_cpu["w"].is_cpu and on_cpu["p"].is_cpu
        assert torch.equal(on_cpu["w"], state["w"].cpu())
        moved = plugin.load_checkpoint(path, map_location={"cuda:0": "cpu"})
        assert moved["w"].is_cpu
        plugin.teardown()


@pytest.mark.parametrize("asynchronous", [False, True],
                         ids=["sync", "async"])
def test_gpu_fit_resumes_bit_identical(cuda, tmp_path, asynchronous):
    reference = fit(tmp_path / "reference", EPOCHS, accelerator="cuda")
    fit(tmp_path / "run", 2, accelerator="cuda",
        plugin=ckpt.lightning.CheckpointIO(asynchronous=asynchronous))
    resumed = fit(tmp_path / "run", EPOCHS, resume="last",
                  accelerator="cuda")
    assert resumed[0].steps_run == (EPOCHS - 2) * BATCHES
    assert_resumed_alike(reference, resumed)
    verify(tmp_path / "run")


def test_an_object_torch_would_not_load_is_refused(tmp_path):
    class Config:
        pass

    plugin = ckpt.lightning.CheckpointIO()
    with pytest.raises(ckpt.InvalidArgument,
                       match=r"\['hyper_parameters'\]\['config'\] is a "
                             r".*Config.*add_safe_globals"):
        plugin.save_checkpoint({"hyper_parameters": {"config": Config()}},
                               tmp_path / "x.ckpt")
    assert not os.path.exists(tmp_path / "x.ckpt")
    with pytest.raises(ckpt.InvalidArgument, match="keep_last"):
        ckpt.lightning.CheckpointIO(keep_last=2)
    # A misspelled keyword is told at once, not at the first save (an
    # epoch into training).
    with pytest.raises(TypeError, match="'asyncronous'.*did you mean "
                                        "'asynchronous'"):
        ckpt.lightning.CheckpointIO(asyncronous=True)
    with pytest.raises(TypeError, match="'chunksize'.*'chunk_size'"):
        ckpt.lightning.CheckpointIO(chunksize=1 << 20)
    plugin.teardown()


if __name__ == "__main__" and sys.argv[1:2] == ["die"]:
    fit(sys.argv[2], EPOCHS, callbacks=[Die(2)],
        plugin=ckpt.lightning.CheckpointIO(asynchronous=True))
    sys.exit(1)  # Die did not fire
