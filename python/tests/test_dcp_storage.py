"""PyTorch's distributed checkpoint (dcp.save, dcp.async_save, dcp.load)
with ckpt.torch.StorageWriter and StorageReader as its storage: real
torchrun jobs (gloo, CPU; dcp_job.py is the job) save at 2 ranks and load
at 3, bit for bit, into DTensors split anew; the result is a ckpt root that
`ckpt ls` and `ckpt verify` read; a flipped byte makes dcp.load raise on
every rank with the state unchanged. In one process (no process group):
the checkpoint_id rule, manager options (retention, the catalog) passed
through, and an s3:// root on an emulated S3 server."""

import glob
import io
import os
import socket
import struct
import subprocess
import sys
import threading
import warnings

import pytest

import ckpt

import torchrun_util

torchrun_util.skip_without_torchrun("test_dcp_storage.py")

import torch  # noqa: E402 - after the skip

try:
    import torch.distributed.checkpoint as dcp
except ImportError as e:  # pragma: no cover - PyTorch 1.13 has it
    torchrun_util.skip_module("test_dcp_storage.py",
                              f"torch.distributed.checkpoint: {e}")

import ckpt.torch as ct  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "dcp_job.py")

# dcp.save and dcp.load without a process group say that they assume one
# process: that is what these tests mean.
one_process = pytest.mark.filterwarnings(
    "ignore:torch.distributed is disabled")


def torchrun(n, *ops):
    """Runs dcp_job.py OPS on n processes; its stderr."""
    rc, out, err = torchrun_util.torchrun(n, JOB, ops)
    assert rc == 0, (f"torchrun -n {n} {' '.join(map(str, ops))} exited "
                     f"{rc}:\n{out}{err}")
    return err


def cli(*args):
    """(exit status, output) of the ckpt command, or None where CKPT_CLI is
    not set (ctest sets it), said in a warning."""
    exe = os.environ.get("CKPT_CLI")
    if not exe:
        warnings.warn(pytest.PytestWarning(
            "test_dcp_storage.py: CKPT_CLI is not set (the ckpt binary; "
            "ctest sets it): `ckpt ls` and `ckpt verify` are not run"))
        return None
    run = subprocess.run([exe, *args], capture_output=True, text=True,
                         timeout=60)
    return run.returncode, run.stdout + run.stderr


def flip_a_data_byte(root, step):
    """Flips one byte in the middle of the tensor data of rank 0's data
    object of `step` (past its safetensors header)."""
    [path] = glob.glob(os.path.join(root, f"step-{step:012d}",
                                    "r00000-*.safetensors"))
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        start = 8 + struct.unpack("<Q", bytes(data[:8]))[0]
        i = start + (len(data) - start) // 2
        data[i] ^= 0x10
        f.seek(0)
        f.write(data)
    return path


def test_dcp_save_at_2_ranks_loads_at_3_and_a_flipped_byte_changes_nothing(
        tmp_path):
    root = str(tmp_path / "run")
    # dcp.save (step 1) and dcp.async_save (step 2) of a replicated tensor,
    # a DTensor, an optimizer state and Python values.
    torchrun(2, "save", root)
    steps = ckpt.open(root, create=False).list()
    assert [(i.step, i.world_size) for i in steps] == [(1, 2), (2, 2)]
    listed = cli("ls", root)
    if listed is not None:
        rc, out = listed
        assert rc == 0, out
        rows = [line.split()[:1] for line in out.splitlines()[1:]]
        assert rows == [["1"], ["2"]], out
        rc, out = cli("verify", root, "--all")
        assert rc == 0 and out.count("ok: step") == 2, out
    flip_a_data_byte(root, 1)
    # At 3 ranks: the newest step (async_save's) loads bit for bit into a
    # DTensor split over 3; step 1, damaged, raises on every rank and
    # changes nothing.
    err = torchrun(3, "load", root, "-", 2, "damaged", root, 1)
    for rank in range(3):
        assert f"rank {rank} ok load" in err, err
        assert f"rank {rank} raised CheckpointException (DataLoss)" in err, \
            err
        assert f"rank {rank} ok damaged" in err, err
    verified = cli("verify", root, "--step", "1")
    if verified is not None:
        rc, out = verified
        assert rc == 1 and "checksum mismatch" in out, out


def test_dcps_background_process_is_refused_at_once(tmp_path):
    # dcp.async_save(async_checkpointer_type=PROCESS) saves a pickled copy
    # of the writer in DCP's own process, which waited for the lease this
    # process holds (70 s), then failed blaming "another party" and
    # advising to break the lease. Now it fails at once, naming the
    # executor, saves nothing, and the default executor saves on.
    root = str(tmp_path / "run")
    err = torchrun(1, "process", root)
    assert "rank 0 refused PROCESS" in err, err
    assert [i.step for i in ckpt.open(root).list()] == [1, 2]


def small_state(v):
    g = torch.Generator().manual_seed(v)
    return {"w": torch.randn(4, 3, generator=g),
            "b": torch.randn(3, generator=g).to(torch.bfloat16),
            "n": torch.tensor(float(v)),
            "optim": {"state": {0: {"m": torch.randn(3, generator=g)}},
                      "param_groups": [{"lr": 0.1 * v, "params": [0]}]},
            "epoch": v, "name": f"v{v}"}


def loaded(reader, checkpoint_id=None):
    """A state loaded by dcp.load through `reader`."""
    got = small_state(0)
    for k in ("w", "b", "n"):
        got[k].zero_()
    dcp.load(got, storage_reader=reader, checkpoint_id=checkpoint_id)
    return got


def same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
        elif isinstance(a[k], dict):
            same(a[k], b[k])
        else:
            assert a[k] == b[k], k


@one_process
def test_checkpoint_id_names_a_root_and_a_step(tmp_path):
    root, other = str(tmp_path / "run"), str(tmp_path / "other")
    writer = ct.StorageWriter(root)
    saved = []
    for checkpoint_id in (None, None, 7, f"{other}@3", None, other):
        dcp.save(small_state(len(saved) + 1), storage_writer=writer,
                 checkpoint_id=checkpoint_id)
        saved.append(writer.last_step)
    # None: the next step (1 in a new root); an int: that step; ROOT@N;
    # a later call without one names the constructor's root again.
    assert saved == [1, 2, 7, 3, 8, 4]
    assert [i.step for i in ckpt.open(root).list()] == [1, 2, 7, 8]
    assert [i.step for i in ckpt.open(other).list()] == [3, 4]
    reader = ct.StorageReader(root)
    same(loaded(reader), small_state(5))  # the newest: step 8
    assert reader.step == 8
    same(loaded(reader, 2), small_state(2))
    same(loaded(reader, f"{other}@3"), small_state(4))
    same(loaded(reader, other), small_state(6))
    # A committed step is not written again.
    with pytest.raises(BaseException, match="AlreadyExists"):
        dcp.save(small_state(1), storage_writer=writer, checkpoint_id=7)
    assert ct.StorageWriter.validate_checkpoint_id(f"{root}@12")
    assert ct.StorageReader.validate_checkpoint_id(3)
    for bad in (-1, True, "", "@4", 1.5):
        assert not ct.StorageWriter.validate_checkpoint_id(bad)
        with pytest.raises(ckpt.InvalidArgument, match="checkpoint_id"):
            writer.reset(bad)
    with pytest.raises(BaseException, match="none does not exist"):
        loaded(ct.StorageReader(str(tmp_path / "none")))
    writer.close()


@one_process
def test_a_root_that_does_not_exist_is_named_with_advice_a_load_takes(
        tmp_path):
    # Not the manager's "open with create=True", which neither the reader
    # nor ct.load takes (and an empty root has nothing to load either).
    missing = str(tmp_path / "nothere")
    with pytest.raises(BaseException) as caught:
        loaded(ct.StorageReader(missing))
    text = str(caught.value)
    assert f"root {missing} does not exist" in text, text
    assert f"ckpt ls {missing}" in text and "create=True" not in text, text
    for step in (None, 3):
        with pytest.raises(ckpt.NotFound) as caught:
            ct.load(small_state(0), missing, step)
        text = str(caught.value)
        assert f"root {missing} does not exist" in text, text
        assert f"ckpt ls {missing}" in text, text
        assert "create=True" not in text, text
    assert not os.path.exists(missing)


class _RunsCode:
    """A pickle that, unpickled, calls os.system: what a hostile root holds."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class Trusted:
    """A class of the job's own, saved by dcp.save as a bytes item."""

    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return isinstance(other, Trusted) and other.v == self.v


@one_process
def test_a_pickle_that_would_run_code_is_not_handed_to_dcps_planner(
        tmp_path):
    # A root whose bytes entry is a pickle calling os.system (written
    # through ckpt itself: any root may come from anyone). DCP's planner
    # would torch.load it with weights_only=False and run it.
    root, marker = str(tmp_path / "run"), str(tmp_path / "ran")
    buf = io.BytesIO()
    torch.save(_RunsCode(marker), buf)
    ckpt.open(root, create=True).save(
        1, {"w": torch.ones(3), "cfg": buf.getvalue()})
    state = {"w": torch.zeros(3), "cfg": 0.5}
    # (DCP raises a rank's error inside its own CheckpointException.)
    with pytest.raises(BaseException,
                       match=r"entry 'cfg': torch.load\(weights_only=True\) "
                             r"refuses it \(.*GLOBAL posix.system.*"
                             r"add_safe_globals"):
        dcp.load(state, storage_reader=ct.StorageReader(root))
    assert not os.path.exists(marker), "the pickle ran"
    assert state["cfg"] == 0.5 and torch.equal(state["w"], torch.zeros(3))
    # A job's own class, allowed as PyTorch allows it, loads.
    # The save says so at once, naming the entry, not first at the resume.
    other = str(tmp_path / "own")
    with pytest.warns(RuntimeWarning,
                      match=r"entry 'obj': torch.load\(weights_only=True\) "
                            r"does not read it back \(.*Trusted.*\), so "
                            r"dcp.load .* will refuse it .*add_safe_globals"):
        dcp.save({"w": torch.ones(3), "obj": Trusted(7)},
                 storage_writer=ct.StorageWriter(other))
    state = {"w": torch.zeros(3), "obj": None}
    with pytest.raises(BaseException, match="entry 'obj'.*Trusted"):
        dcp.load(state, storage_reader=ct.StorageReader(other))
    assert state["obj"] is None
    torch.serialization.add_safe_globals([Trusted])
    try:
        dcp.load(state, storage_reader=ct.StorageReader(other))
    finally:
        torch.serialization.clear_safe_globals()
    assert state["obj"] == Trusted(7) and torch.equal(state["w"],
                                                      torch.ones(3))


@one_process
def test_manager_options_pass_through(tmp_path):
    root, catalog = str(tmp_path / "run"), str(tmp_path / "catalog.sqlite")
    writer = ct.StorageWriter(root, keep_last=2, catalog=catalog,
                              job_id="dcp-job")
    for v in (1, 2, 3):
        future = dcp.async_save(small_state(v), storage_writer=writer)
        future.result()
    assert [i.step for i in ckpt.open(root).list()] == [2, 3]
    assert ckpt.Catalog(catalog).latest("dcp-job").step == 3
    same(loaded(ct.StorageReader(root)), small_state(3))
    writer.close()
    # A misspelled option is told when the writer is made, not inside
    # DCP's CheckpointException at the first dcp.save.
    with pytest.raises(TypeError, match="'keep_lats'.*'keep_last'"):
        ct.StorageWriter(root, keep_lats=2)


class _FailsToSave:
    """A Stateful object whose state_dict() raises: dcp.save and dcp.load
    fail after reset(checkpoint_id), before the storage is set up."""

    def state_dict(self):
        raise RuntimeError("no state today")

    def load_state_dict(self, state):
        pass


@one_process
def test_a_failed_call_leaves_its_checkpoint_id_to_no_later_call(tmp_path):
    root, other = str(tmp_path / "run"), str(tmp_path / "other")
    writer = ct.StorageWriter(root)
    dcp.save(small_state(1), storage_writer=writer)
    with pytest.raises(RuntimeError, match="no state today"):
        dcp.save({"bad": _FailsToSave()}, storage_writer=writer,
                 checkpoint_id=f"{other}@7")
    dcp.save(small_state(2), storage_writer=writer)  # the next step of root
    assert writer.last_step == 2 and not os.path.exists(other)
    reader = ct.StorageReader(root)
    with pytest.raises(RuntimeError, match="no state today"):
        dcp.load({"bad": _FailsToSave()}, storage_reader=reader,
                 checkpoint_id=1)
    same(loaded(reader), small_state(2))  # the newest, not step 1
    assert reader.step == 2
    writer.close()


class _Meet(dcp.DefaultSavePlanner):
    """A planner that holds its save until the other one's has started:
    both reset() the writer before either sets it up."""

    def __init__(self, barrier):
        super().__init__()
        self.barrier = barrier

    def set_up_planner(self, *args, **kwargs):
        self.barrier.wait(timeout=60)
        return super().set_up_planner(*args, **kwargs)


@one_process
def test_async_saves_in_flight_together_on_one_writer(tmp_path):
    root = str(tmp_path / "run")
    writer = ct.StorageWriter(root)
    barrier = threading.Barrier(2)
    futures = [dcp.async_save(small_state(v), storage_writer=writer,
                              checkpoint_id=10 + v, planner=_Meet(barrier))
               for v in (1, 2)]
    for future in futures:
        future.result()
    assert [i.step for i in ckpt.open(root).list()] == [11, 12]
    reader = ct.StorageReader(root)
    for v in (1, 2):
        same(loaded(reader, 10 + v), small_state(v))
    writer.close()


@one_process
def test_one_root_spelled_two_ways_is_one_manager(tmp_path, monkeypatch):
    # A second manager of the same folder would wait for the first one's
    # lease (70 s by default; here it would fail at once) and fail naming
    # this very process as "another party".
    monkeypatch.chdir(tmp_path)
    writer = ct.StorageWriter("run", lease_wait_seconds=0)
    steps = []
    for checkpoint_id in (None, f"{tmp_path}/run@5", f"file://{tmp_path}/run/",
                          "./run"):
        dcp.save(small_state(len(steps) + 1), storage_writer=writer,
                 checkpoint_id=checkpoint_id)
        steps.append(writer.last_step)
    assert steps == [1, 5, 6, 7]
    same(loaded(ct.StorageReader(f"{tmp_path}/run/")), small_state(4))
    writer.close()


@one_process
def test_a_folder_of_dcps_own_writer_is_named_with_how_to_import_it(
        tmp_path):
    # "no committed checkpoint" alone reads as an empty root: the message
    # says what the folder is and how to make a ckpt root of it.
    written = str(tmp_path / "dcp-run")
    dcp.save(small_state(1), storage_writer=dcp.FileSystemWriter(written))
    assert sorted(os.listdir(written)) == [".metadata", "__0_0.distcp"]
    hint = (rf"{written} holds a checkpoint written by "
            rf"torch\.distributed\.checkpoint's own writer .*not a ckpt "
            rf"root.*ckpt import-dcp {written} NEW_ROOT --step N.*"
            rf"ckpt\.torch\.import_dcp\(")
    state = small_state(0)
    with pytest.raises(ckpt.NotFound,
                       match=rf"load of the newest step of {written}: {hint}"):
        ct.load(state, written)
    with pytest.raises(ckpt.NotFound, match=rf"load step 1 from .*{hint}"):
        ct.load(state, written, 1)
    same(state, small_state(0))
    for checkpoint_id in (None, 1):
        with pytest.raises(BaseException, match=f"dcp.load .*{hint}"):
            loaded(ct.StorageReader(written), checkpoint_id)
    # The route the message gives works.
    ct.import_dcp(written, str(tmp_path / "root"), 1)
    same(loaded(ct.StorageReader(str(tmp_path / "root"))), small_state(1))


@one_process
def test_a_state_that_does_not_fit_a_dcp_step_is_no_missing_checkpoint(
        tmp_path):
    root = str(tmp_path / "run")
    dcp.save(small_state(1), storage_writer=ct.StorageWriter(root))
    state = small_state(0)
    state["extra"] = torch.zeros(2)
    with pytest.raises(ckpt.InvalidArgument,
                       match=rf"load step 1 from {root}: the checkpoint has "
                             rf"no entry 'extra'.*nothing was changed"):
        ct.load(state, root)
    same({k: v for k, v in state.items() if k != "extra"}, small_state(0))


@one_process
def test_close_gives_the_lease_back_whatever_still_holds_the_manager(
        tmp_path):
    # close() only dropped the writer's manager from the cache: a failed
    # save's traceback (kept by its future) still held it, with the root's
    # lease, and the next writer of the root waited lease_wait_seconds.
    root = str(tmp_path / "run")
    writer = ct.StorageWriter(root)
    dcp.save(small_state(1), storage_writer=writer)
    future = dcp.async_save({"c": torch.zeros(2, dtype=torch.complex64)},
                            storage_writer=writer)
    with pytest.raises(BaseException, match="complex64"):
        future.result()
    writer.close()
    with ckpt.open(root, lease_wait_seconds=0) as mgr:  # held: it raises
        mgr.save(5, {"w": torch.ones(2)})
    again = ct.StorageWriter(root)
    dcp.save(small_state(2), storage_writer=again)
    assert again.last_step == 6
    again.close()
    del future


@one_process
def test_a_writer_of_other_options_takes_the_root_from_ct_at_once(tmp_path):
    # The manager of ct.async_save, which its handle refers to, was only
    # dropped from the cache when a writer of other options took the root:
    # it kept the lease, and the writer waited lease_wait_seconds for it.
    root = str(tmp_path / "run")
    handle = ct.async_save(small_state(1), root, 1)
    handle.wait()
    writer = ct.StorageWriter(root, keep_last=2, lease_wait_seconds=0)
    dcp.save(small_state(2), storage_writer=writer)
    assert writer.last_step == 2
    same(loaded(ct.StorageReader(root)), small_state(2))
    writer.close()
    del handle


def _load_all(reader, keys=None):
    """What DCP's planner for an empty state loads from `reader` (as its
    format_utils.dcp_to_torch_save does), nested by DCP's planner_data."""
    from torch.distributed.checkpoint.default_planner import \
        _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import \
        _load_state_dict
    state = {}
    _load_state_dict(state, storage_reader=reader, no_dist=True,
                     planner=_EmptyStateDictLoadPlanner(keys=keys))
    return state


@one_process
def test_dcps_planner_data_goes_along_for_its_planner_of_an_empty_state(
        tmp_path):
    # DCP's planners of an empty state rebuild the nesting from the
    # Metadata's planner_data, and with keys= index it for every name: a
    # root that gave none made them fail (AttributeError on None).
    sd = {"model": {"layer.0": {"w": torch.arange(6.0).reshape(2, 3)},
                    "blocks": [torch.ones(2), torch.zeros(1)]},
          "optim": {"param_groups": [{"lr": 0.1, "params": [0]}]},
          "epoch": 4}
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(tmp_path / "fs")))
    root = str(tmp_path / "run")
    dcp.save(sd, storage_writer=ct.StorageWriter(root))
    ct.import_dcp(str(tmp_path / "fs"), str(tmp_path / "imported"), 1)
    want = _load_all(dcp.FileSystemReader(str(tmp_path / "fs")))
    assert want["model"]["blocks"][0].tolist() == [1.0, 1.0]
    for where in (root, str(tmp_path / "imported")):
        got = _load_all(ct.StorageReader(where))
        assert repr(got) == repr(want), where
        assert repr(_load_all(ct.StorageReader(where), keys={"model"})) == \
            repr({"model": want["model"]}), where
    # The mapping is the package's own entry: no value of the state, so
    # ckpt's own loads neither return it nor ask a strict state for it.
    assert "__dcp_planner_data__" not in ckpt.open(root).load()
    dcp.save({"model": sd["model"]},  # tensors only
             storage_writer=ct.StorageWriter(root))
    state = {"model": {"layer.0": {"w": torch.zeros(2, 3)},
                       "blocks": [torch.zeros(2), torch.ones(1)]}}
    ct.load(state, root, strict=True)
    ckpt.open(root).load_into(state, strict=True)
    assert torch.equal(state["model"]["layer.0"]["w"],
                       sd["model"]["layer.0"]["w"])
    # A step without a recorded mapping (ckpt.torch.save's) is described
    # by its names split at their dots, as ckpt.open(root).load() nests it.
    ct.save({"model": {"w": torch.ones(2)}}, str(tmp_path / "ct"), 1)
    got = _load_all(ct.StorageReader(str(tmp_path / "ct")), keys={"model"})
    assert list(got) == ["model"] and torch.equal(got["model"]["w"],
                                                  torch.ones(2))
    ct.close()


@pytest.fixture
def s3_bucket(tmp_path, monkeypatch):
    """An emulated S3 server (moto's, src/testing/moto_s3.py) with an empty
    bucket, and the AWS_* variables that point ckpt at it."""
    try:
        import moto  # noqa: F401 - only whether it imports
    except ImportError as e:
        why = f"moto is not importable ({e}): no s3:// root here"
        warnings.warn(pytest.PytestWarning(f"test_dcp_storage.py: {why}"))
        pytest.skip(why)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = os.path.join(HERE, "..", "..", "src", "testing", "moto_s3.py")
    log = open(tmp_path / "moto.log", "w+")
    proc = subprocess.Popen([sys.executable, server, str(port), "dcp"],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", log.read()
        for name, value in (("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}"),
                            ("AWS_ACCESS_KEY_ID", "test"),
                            ("AWS_SECRET_ACCESS_KEY", "test"),
                            ("AWS_REGION", "us-east-1")):
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
        yield "s3://dcp"
    finally:
        proc.kill()
        proc.wait()
        log.close()


@one_process
def test_an_s3_root(s3_bucket):
    root = f"{s3_bucket}/run"
    writer = ct.StorageWriter(root)
    dcp.save(small_state(1), storage_writer=writer)
    dcp.async_save(small_state(2), storage_writer=writer).result()
    assert [i.step for i in ckpt.open(root).list()] == [1, 2]
    reader = ct.StorageReader(root)
    same(loaded(reader), small_state(2))
    same(loaded(reader, f"{root}@1"), small_state(1))
    writer.close()


def test_a_mistyped_s3_prefix_is_not_found_not_a_fresh_start(s3_bucket):
    # As a local path that does not exist: a resume loop reading a typo'd
    # prefix must not start the job over.
    root = f"{s3_bucket}/run"
    with ckpt.open(root) as mgr:
        mgr.save(1, {"x": torch.zeros(2)})
    with ckpt.open(f"{s3_bucket}/rnu") as typo:
        with pytest.raises(ckpt.NotFound, match="rnu"):
            typo.latest()
    with ckpt.open(f"{s3_bucket}/new", create=True) as fresh:
        assert fresh.latest() is None  # a first run says so
    with ckpt.open(root) as mgr:
        assert mgr.latest() == 1

