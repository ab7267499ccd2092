"""Checkpoints of PyTorch's own DCP format in and out of ckpt:
`ckpt import-dcp DIR ROOT --step N` of what DCP's FileSystemWriter wrote
at 3 ranks (a DTensor in uneven Shard(0) shards, a replicated tensor,
bfloat16, nested optimizer state, Python values), loaded through ckpt at 2
ranks bit for bit; `ckpt export ROOT --step N --format dcp DIR` loaded by
DCP's FileSystemReader at 2 ranks bit for bit (dcp_job.py is the job).
A hostile .metadata pickle is refused and nothing in it runs; a truncated
data file is named and leaves the root as it was."""

import os
import pickle
import subprocess
import sys
import warnings

import pytest

import ckpt

import torchrun_util

torchrun_util.skip_without_torchrun("test_dcp_files.py")

import torch  # noqa: E402 - after the skip

try:
    import torch.distributed.checkpoint as dcp
except ImportError as e:  # pragma: no cover
    torchrun_util.skip_module("test_dcp_files.py",
                              f"torch.distributed.checkpoint: {e}")

import ckpt.torch as ct  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "dcp_job.py")

one_process = pytest.mark.filterwarnings(
    "ignore:torch.distributed is disabled")


def torchrun(n, *ops):
    rc, out, err = torchrun_util.torchrun(n, JOB, ops)
    assert rc == 0, (f"torchrun -n {n} {' '.join(map(str, ops))} exited "
                     f"{rc}:\n{out}{err}")
    return err


def cli(*args):
    """(exit status, stdout, stderr) of the ckpt command, which runs this
    Python with this package for the DCP commands. Without CKPT_CLI (ctest
    sets it) the package's converter is run the way the tool runs it, said
    in a warning."""
    env = dict(os.environ)
    package_dir = os.path.dirname(os.path.dirname(ckpt.__file__))
    env["PYTHONPATH"] = os.pathsep.join(
        [package_dir] + [p for p in [env.get("PYTHONPATH")] if p])
    env["CKPT_PYTHON"] = sys.executable
    exe = os.environ.get("CKPT_CLI")
    if exe:
        cmd = [exe, *args]
    else:
        warnings.warn(pytest.PytestWarning(
            "test_dcp_files.py: CKPT_CLI is not set (the ckpt binary; ctest "
            "sets it): the DCP converter is run without it"))
        if args[0] == "export":
            args = [a for a in args if a not in ("--format", "dcp")]
        cmd = [sys.executable, "-m", "ckpt._dcp_files", *args]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env,
                         timeout=120)
    return run.returncode, run.stdout, run.stderr


def test_a_dcp_checkpoint_of_3_ranks_imported_loads_at_2_and_its_export_too(
        tmp_path):
    written = str(tmp_path / "dcp-written")
    root = str(tmp_path / "root")
    exported = str(tmp_path / "dcp-exported")
    torchrun(3, "fssave", written, 3)

    rc, out, err = cli("import-dcp", written, root, "--step", "7")
    assert rc == 0, err
    assert "as step 7 of" in out
    # Starting ROOT is what an import is for: not warned of as a mistyped
    # resume would be.
    assert "new, empty root" not in err, err
    rc, out, err = cli("verify", root) if os.environ.get("CKPT_CLI") else (
        0, "ok", "")
    assert rc == 0 and "ok" in out, out + err

    rc, out, err = cli("export", root, "--step", "7", "--format", "dcp",
                       exported)
    assert rc == 0, err
    assert os.path.isfile(os.path.join(exported, ".metadata"))
    # Exported once, kept unless --force.
    rc, _, err = cli("export", root, "--format", "dcp", exported)
    assert rc == 1 and "--force" in err, err

    # Through ckpt's reader and through DCP's own, at 2 ranks: state(3).
    torchrun(2, "load", root, 7, 3, "fsload", exported, 3)


@one_process
def test_import_and_export_from_python_keep_every_value(tmp_path):
    sd = {"w": torch.arange(12.0).reshape(3, 4),
          "half": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
          "zero_d": torch.tensor(7, dtype=torch.int64),
          "empty": torch.zeros(0, 5),
          "extra": {"epoch": 3, "name": "run"}}
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(tmp_path / "in")))
    done = ct.import_dcp(str(tmp_path / "in"), str(tmp_path / "root"), 4,
                         epoch=2)
    assert (done["step"], done["tensors"], done["blobs"]) == (4, 4, 2)
    info = ckpt.open(str(tmp_path / "root")).describe(4).info
    assert info.epoch == 2
    done = ct.export_dcp(str(tmp_path / "root"), None, str(tmp_path / "out"))
    assert done["step"] == 4 and done["left_out"] == []
    got = {"w": torch.zeros(3, 4),
           "half": torch.zeros(2, dtype=torch.bfloat16),
           "zero_d": torch.tensor(0, dtype=torch.int64),
           "empty": torch.ones(0, 5), "extra": {"epoch": 0, "name": ""}}
    dcp.load(got, storage_reader=dcp.FileSystemReader(str(tmp_path / "out")))
    for k in ("w", "half", "zero_d", "empty"):
        assert got[k].dtype == sd[k].dtype and torch.equal(got[k], sd[k]), k
    assert got["extra"] == sd["extra"]
    # DCP's planner_data went along: DCP's own tool rebuilds the nesting.
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(str(tmp_path / "out"), str(tmp_path / "out.pt"))
    assert torch.load(str(tmp_path / "out.pt"))["extra"] == sd["extra"]


class _Hostile:
    """Unpickles as a call to os.system that would create `marker`."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class _HostileExec:
    """Unpickles as builtins.exec of code that would create `marker`."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').close()",)


def test_a_hostile_metadata_pickle_is_refused_and_never_run(tmp_path):
    marker = tmp_path / "ran"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / ".metadata").write_bytes(pickle.dumps(_Hostile(str(marker))))
    root = tmp_path / "root"
    rc, out, err = cli("import-dcp", str(bad), str(root), "--step", "1")
    assert rc == 1, out + err
    assert "refused" in err and "system" in err and ".metadata" in err, err
    assert not marker.exists()
    assert not root.exists()


def test_exec_in_a_metadata_pickle_is_refused(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / ".metadata").write_bytes(
        pickle.dumps(_HostileExec(str(marker))))
    with pytest.raises(ckpt.InvalidArgument, match="refused.*builtins.exec"):
        ct.import_dcp(str(tmp_path), str(tmp_path / "root"), 1)
    assert not marker.exists()
    assert not (tmp_path / "root").exists()


def test_getattr_in_a_metadata_pickle_reaches_enum_members_only(tmp_path):
    from ckpt import _dcp_files

    class Sneaky:
        def __reduce__(self):
            return getattr, (torch.Size, "__init__")

    (tmp_path / ".metadata").write_bytes(pickle.dumps(Sneaky()))
    with pytest.raises(ckpt.InvalidArgument, match="refused.*getattr"):
        _dcp_files.read_metadata(str(tmp_path))


@one_process
def test_a_truncated_data_file_is_named_and_the_root_stays_as_it_was(
        tmp_path):
    written = tmp_path / "dcp"
    dcp.save({"w": torch.arange(1000.0)},
             storage_writer=dcp.FileSystemWriter(str(written)))
    [data] = [p for p in written.iterdir() if p.suffix == ".distcp"]
    data.write_bytes(data.read_bytes()[:-100])
    root = tmp_path / "root"
    ckpt.open(str(root), create=True).save(1, {"x": 1})
    with pytest.raises(ckpt.DataLoss) as e:
        ct.import_dcp(str(written), str(root), 2)
    assert data.name in str(e.value) and "'w'" in str(e.value)
    assert "truncated" in str(e.value)
    assert [c.step for c in ckpt.open(str(root)).list()] == [1]


def test_a_directory_without_metadata_is_named(tmp_path):
    with pytest.raises(ckpt.NotFound, match=r"\.metadata.*FileSystemWriter"):
        ct.import_dcp(str(tmp_path), str(tmp_path / "r"), 1)


@one_process
def test_damaged_metadata_bytes_give_ckpt_errors_only(tmp_path):
    """Every mutation of a real .metadata (a flipped, dropped or cut byte)
    reads as DCP's metadata or fails with a ckpt error naming the file:
    never another exception, never code run."""
    import random

    from ckpt import _dcp_files

    dcp.save({"w": torch.arange(6.0).reshape(2, 3), "x": {"a": 1}},
             storage_writer=dcp.FileSystemWriter(str(tmp_path / "good")))
    good = (tmp_path / "good" / ".metadata").read_bytes()
    rng = random.Random(0)
    bad = tmp_path / "bad"
    bad.mkdir()
    for _ in range(400):
        data = bytearray(good)
        i = rng.randrange(len(data))
        how = rng.randrange(3)
        if how == 0:
            data[i] = rng.randrange(256)
        elif how == 1:
            del data[i]
        else:
            del data[i:]
        (bad / ".metadata").write_bytes(bytes(data))
        try:
            _dcp_files.read_metadata(str(bad))
        except ckpt.Error as e:
            assert ".metadata" in str(e)
            # A forged length is found before anything is allocated for it
            # (one of these mutations once made the unpickler take 19 GB).
            assert "MemoryError" not in str(e)


@pytest.mark.parametrize("forged,message", [
    # BYTEARRAY8 (protocol 5) of 2^33 bytes: the unpickler allocates the
    # length it is told before it reads.
    (b"\x80\x05\x96" + (1 << 33).to_bytes(8, "little") + b"xx.",
     "bytearray8, but only"),
    # A frame of 2^33 bytes.
    (b"\x80\x04\x95" + (1 << 33).to_bytes(8, "little") + b"N.",
     "runs past the file"),
    # A memo index of 2^31: the memo would grow to it.
    (b"\x80\x04N\x72" + (1 << 31).to_bytes(4, "little") + b".",
     "memo index"),
])
def test_forged_lengths_are_refused_before_any_allocation(tmp_path, forged,
                                                          message):
    from ckpt import _dcp_files

    (tmp_path / ".metadata").write_bytes(forged)
    with pytest.raises(ckpt.DataLoss, match=message) as e:
        _dcp_files.read_metadata(str(tmp_path))
    assert str(tmp_path / ".metadata") in str(e.value)


def saved_by_dcp(tmp_path):
    """(folder, its .metadata, the Metadata) of a DCP save of one tensor,
    for a test to change."""
    written = tmp_path / "dcp"
    dcp.save({"w": torch.arange(6.0)},
             storage_writer=dcp.FileSystemWriter(str(written)))
    path = written / ".metadata"
    return written, path, pickle.loads(path.read_bytes())  # DCP's own


@one_process
def test_a_size_nested_without_end_is_data_loss_not_a_crash(tmp_path):
    written, path, md = saved_by_dcp(tmp_path)
    md.state_dict_metadata["w"].size = ["SENTINEL"]
    data = pickle.dumps(md, protocol=4)
    # The string becomes a list nested 200,000 deep (EMPTY_LIST, APPEND),
    # which the unpickler builds without recursion and repr() cannot show.
    n = 200_000
    path.write_bytes(data.replace(b"\x8c\x08SENTINEL",
                                  b"]" * n + b"a" * (n - 1)))
    with pytest.raises(ckpt.DataLoss, match=r"\.metadata: .*size is \[\[\[") \
            as e:
        ct.import_dcp(str(written), str(tmp_path / "root"), 1)
    assert len(str(e.value)) < 1000
    assert not (tmp_path / "root").exists()


@one_process
def test_a_data_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    written, path, md = saved_by_dcp(tmp_path)
    for info in md.storage_data.values():
        info.relative_path = "fifo"
    path.write_bytes(pickle.dumps(md))
    os.mkfifo(written / "fifo")  # no writer: an open() would wait for one
    with pytest.raises(ckpt.DataLoss, match="fifo.*not a regular file"):
        ct.import_dcp(str(written), str(tmp_path / "root"), 1)
    assert not (tmp_path / "root").exists()


@one_process
@pytest.mark.parametrize("change,message", [
    ("gap", "cover 6 of its 12 elements"),
    ("huge", "bytes of tensor in"),
    ("outside", "lies outside its shape"),
])
def test_chunks_that_do_not_tile_their_tensor_are_refused(tmp_path, change,
                                                          message):
    written = tmp_path / "dcp"
    dcp.save({"w": torch.arange(6.0).reshape(2, 3)},
             storage_writer=dcp.FileSystemWriter(str(written)))
    path = written / ".metadata"
    md = pickle.loads(path.read_bytes())  # DCP's own, written just now
    w = md.state_dict_metadata["w"]
    if change == "gap":
        w.size = torch.Size([4, 3])
    elif change == "huge":
        w.size = torch.Size([1 << 40, 3])
        w.chunks[0].sizes = torch.Size([1 << 40, 3])
    else:
        w.chunks[0].offsets = torch.Size([1, 0])
    path.write_bytes(pickle.dumps(md))
    with pytest.raises(ckpt.DataLoss, match=message):
        ct.import_dcp(str(written), str(tmp_path / "root"), 1)
    assert not (tmp_path / "root").exists()
