"""ckpt.torch_communicator() under torchrun: real jobs of 1 to 4 processes
(gloo, CPU) save, commit and load with every rank taking part, as under
mpirun (test_cluster.py); torchrun_job.py is the job."""

import gc
import os
import re
import warnings

import numpy as np
import pytest

import ckpt

import torchrun_util

torchrun_util.skip_without_torchrun("test_torchrun.py")

import torch.distributed as dist  # noqa: E402 - after the skip

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "torchrun_job.py")


def _skip_test(why):
    warnings.warn(pytest.PytestWarning(f"skipped: {why}"))
    pytest.skip(why)


def torchrun(n, *ops):
    """Runs torchrun_job.py OPS on n processes; its stderr."""
    rc, out, err = torchrun_util.torchrun(n, JOB, ops)
    assert rc == 0, (f"torchrun -n {n} {' '.join(map(str, ops))} exited "
                     f"{rc}:\n{out}{err}")
    return err


def test_torch_communicator_needs_an_initialized_process_group():
    assert not dist.is_initialized()
    with pytest.raises(ckpt.FailedPrecondition,
                       match="init_process_group first"):
        ckpt.torch_communicator()


def test_a_timeout_ends_a_collective_that_a_rank_never_reaches():
    err = torchrun(2, "silent", "2")
    assert "rank 0 timed out: " in err, err


def test_a_timeout_is_for_ckpts_own_group(one_rank_group):
    with pytest.raises(ckpt.InvalidArgument, match="new_group"):
        ckpt.torch_communicator(dist.new_group(backend="gloo"), timeout=5)
    with pytest.raises(ckpt.InvalidArgument, match="seconds > 0"):
        ckpt.torch_communicator(timeout=-1)


def errors_by_rank(err):
    """{rank: [(class, message), ...]} of the errors a job printed."""
    out = {}
    for rank, cls, message in re.findall(r"rank (\d+) error (\w+): (.*)",
                                         err):
        out.setdefault(int(rank), []).append((cls, message))
    return out


def test_save_at_2_and_4_ranks_load_at_1_2_3_4(tmp_path):
    two, four, bad = tmp_path / "two", tmp_path / "four", tmp_path / "bad"
    # The same through ckpt.torch, with sharded leaves.
    t2, t4, tbad = tmp_path / "t2", tmp_path / "t4", tmp_path / "tbad"
    torchrun(4, "save", four, "tsave", t4)
    # Rank 1 saves "bias" with another shape: the plan refuses it. Then
    # rank 1's state cannot even be made: every rank still gets its error.
    err = torchrun(2, "save", two, "tsave", t2, "bad", bad, "tbad", tbad,
                   "load", four, 4, "load", two, 2, "tload", t4)
    errors = errors_by_rank(err)
    assert sorted(errors) == [0, 1] and errors[0] == errors[1], err
    assert [cls for cls, _ in errors[0]] == [
        "InvalidArgument", "Aborted", "InvalidArgument"], err
    assert 'entry "bias" differs between ranks' in errors[0][0][1]
    assert errors[0][1][1].endswith(
        "rank 1: RuntimeError: this object cannot say its state")
    assert "rank 1: entry 'odd': the DTensor placement Partial(sum)" in \
        errors[0][2][1]
    for root in (bad, tbad):
        assert not root.exists()  # no save committed, so none made the root
    for m in (1, 3, 4):
        torchrun(m, "load", two, 2, "load", four, 4, "tload", t2,
                 "tload", t4)
    # A load_state_dict() that raises on one rank: every rank raises and
    # none changes its state (were the others to keep the load, the job's
    # ranks would go on from different steps).
    err = torchrun(2, "trefused", t4)
    refused = dict(re.findall(r"rank (\d+) refused (\w+): ", err))
    assert refused == {"0": "Aborted", "1": "ValueError"}, err
    # A single process, with no communicator, sees the same checkpoints.
    for root, n in ((two, 2), (four, 4)):
        mgr = ckpt.open(str(root), create=False)
        assert [(i.step, i.world_size) for i in mgr.list()] == [(6, n), (7, n)]
        assert mgr.list()[-1].metrics == {"loss": 0.25}
        assert mgr.load_rank_local("rng") == {
            r: f"rng of rank {r}".encode() for r in range(n)}
        w = mgr.load()["w"]
        assert np.array_equal(
            w, np.arange(120, dtype=np.float32).reshape(30, 4) / 7)


def test_real_sharded_tensors_where_this_pytorch_makes_them(tmp_path):
    try:
        from torch.distributed._shard import sharded_tensor  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any failure to import it
        # PyTorch 1.13 under Python 3.11 refuses one of its own
        # dataclasses; the ShardedTensor path runs on test doubles
        # (sharded_doubles.py) in the jobs above.
        _skip_test(f"this PyTorch cannot make a ShardedTensor "
                   f"({type(e).__name__}: {e})")
    torchrun(2, "real", tmp_path / "real")
    whole = ckpt.open(str(tmp_path / "real"), create=False).load()["rows"]
    assert np.array_equal(whole, np.arange(9, dtype=np.int32).reshape(3, 3)
                          - 4)


@pytest.fixture
def one_rank_group(tmp_path):
    """A gloo process group of this process alone."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store",
                            rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_one_rank_group_and_a_failing_collective(one_rank_group, root,
                                                 monkeypatch):
    from ckpt import _torch_dist
    before = set(_torch_dist._CONTEXTS)
    comm = ckpt.torch_communicator()
    assert (comm.rank, comm.size) == (0, 1) and comm.host_name
    comm.barrier()
    mgr = ckpt.open(root, communicator=comm)
    del comm  # the manager keeps the communicator, and its callbacks, alive
    x = np.arange(6.0)
    mgr.save_async(1, {"x": x, "r": ckpt.RankLocal(b"mine")}).wait()
    out = mgr.load()
    assert np.array_equal(out["x"], x) and out["r"] == b"mine"

    def boom(*args):
        raise RuntimeError("the group broke")

    # An exception in a callback is the library's error, on the caller.
    monkeypatch.setattr(_torch_dist._Group, "all_gather", boom)
    with pytest.raises(ckpt.Aborted, match="RuntimeError: the group broke"):
        mgr.save(2, {"x": x})
    assert mgr.latest() == 1
    # Once the library lets the communicator go, so does this package.
    monkeypatch.undo()
    assert len(set(_torch_dist._CONTEXTS) - before) == 1
    del mgr
    gc.collect()
    assert set(_torch_dist._CONTEXTS) <= before


def test_a_gloo_group_passed_in_is_used_as_it_is(one_rank_group, root):
    comm = ckpt.torch_communicator(dist.group.WORLD)
    mgr = ckpt.open(root, communicator=comm)
    mgr.save(3, {"y": np.ones(4, np.int32), "note": "given group"})
    assert mgr.load()["note"] == "given group"
