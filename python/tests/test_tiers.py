"""Tiers from Python (CheckpointManager.tiers, docs/tiers.md): a local tier
in front of the durable root, its intervals, restore from either tier, and
under torchrun a node's lost tier recovered from its peer's replica, then
resharded to one rank."""

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import ckpt

import torchrun_util


def state_at(step):
    return {"w": np.arange(12, dtype=np.float32).reshape(3, 4) + step,
            "pos": ckpt.RankLocal(np.array([step], dtype=np.int64)),
            "step": step, "tag": f"step {step}".encode()}


def zeros():
    return {"w": np.zeros((3, 4), dtype=np.float32),
            "pos": ckpt.RankLocal(np.zeros(1, dtype=np.int64)),
            "step": 0, "tag": b""}


def same(a, b):
    return (a["w"].tobytes() == b["w"].tobytes()
            and a["pos"].value.tobytes() == b["pos"].value.tobytes()
            and a["step"] == b["step"] and a["tag"] == b["tag"])


@pytest.fixture
def local(tmp_path):
    return f"file://{tmp_path}/local"


def test_each_tier_saves_at_its_interval(root, local):
    with ckpt.open(root).tiers(local, local_every=2, durable_every=4,
                               replicas=0) as t:
        got = [t.save(step, state_at(step)) for step in range(1, 9)]
    assert [r.skipped for r in got] == [True, False] * 4
    assert [r.step for r in got if r.local] == [2, 4, 6, 8]
    assert [r.step for r in got if r.durable] == [4, 8]
    assert all(r.local_error == "" for r in got)
    assert got[3].durable_result.info.step == 4
    assert [i.step for i in ckpt.open(root).list()] == [4, 8]
    # Two marked steps stay in the local tier (keep=2).
    shares = ckpt.local_tier(local)
    assert sorted((s["step"], s["marked"]) for s in shares) == [
        (6, True), (8, True)]


def test_the_catalog_lists_both_tiers_and_resumes_only_durable(
        root, local, tmp_path):
    catalog = ckpt.Catalog(str(tmp_path / "catalog.sqlite"), create=True)
    mgr = ckpt.open(root, catalog=catalog)
    with mgr.tiers(local, local_every=1, durable_every=2, replicas=0) as t:
        for step in range(1, 5):
            t.save(step, state_at(step))
    rows = catalog.list(include_deleted=True, tier="local")
    assert [(r.step, r.state) for r in rows] == [
        (1, "deleted"), (2, "deleted"), (3, "committed"), (4, "committed")]
    assert all(r.tier == "local" and r.root == local for r in rows)
    assert [r.step for r in catalog.list(tier="durable")] == [2, 4]
    assert sorted((r.step, r.tier) for r in catalog.list()) == [
        (2, "durable"), (3, "local"), (4, "durable"), (4, "local")]
    assert [r.step for r in catalog.list(tier="local", limit=1)] == [4]
    job = rows[0].job_id
    latest = catalog.latest(job)
    assert (latest.step, latest.tier) == (4, "durable")
    with pytest.raises(ckpt.InvalidArgument, match="no tier"):
        catalog.list(tier="memory")


def test_durable_true_and_false_override_the_interval(root, local):
    with ckpt.open(root).tiers(local, local_every=1, durable_every=2,
                               replicas=0) as t:
        assert t.save(1, state_at(1), durable=True).durable
        assert not t.save(2, state_at(2), durable=False).durable
        assert t.save(3, state_at(3)).local
    assert [i.step for i in ckpt.open(root).list()] == [1]


def test_a_refused_state_names_the_save_and_the_root(root, local):
    """A state the tiers refuse (a value that cannot be saved, a bad entry
    name) said what was wrong, not which save of which root."""
    with ckpt.open(root).tiers(local, local_every=1, durable_every=2,
                               replicas=0) as t:
        for save in (t.save, lambda s, st: t.save_async(s, st).wait()):
            with pytest.raises(ckpt.InvalidArgument,
                               match=f"^save step 4 to .*{root}.*: .*object"):
                save(4, {"w": object()})
            with pytest.raises(ckpt.Error, match="^save step 4 to "):
                save(4, {"a/../b": np.zeros(2, np.float32)})
        assert t.save(4, state_at(4)).durable


def test_restore_takes_the_newest_step_of_either_tier(root, local, tmp_path):
    mgr = ckpt.open(root)
    with mgr.tiers(local, local_every=1, durable_every=3, replicas=0) as t:
        empty = zeros()
        r = t.restore(empty)
        assert (r.tier, r.step, r.info) == ("none", -1, None)
        assert same(empty, zeros())
        for step in range(1, 6):
            t.save_async(step, state_at(step)).wait()
        got = zeros()
        r = t.restore(got)
        assert (r.tier, r.step, r.info.step) == ("local", 5, 5)
        assert same(got, state_at(5))
    # The node's memory is gone: the durable tier's newest step.
    shutil.rmtree(tmp_path / "local")
    with mgr.tiers(local, local_every=1, durable_every=3, replicas=0) as t:
        got = zeros()
        r = t.restore(got)
        assert (r.tier, r.step) == ("durable", 3)
        assert same(got, state_at(3))


def test_torch_tensors_and_a_strict_restore(root, local):
    torch = pytest.importorskip("torch")
    saved = {"m": torch.arange(6, dtype=torch.bfloat16), "k": 2}
    with ckpt.open(root).tiers(local, durable_every=1, replicas=0) as t:
        t.save(1, saved)
        got = {"m": torch.zeros(6, dtype=torch.bfloat16), "k": 0}
        assert t.restore(got).tier == "local"
        assert torch.equal(got["m"], saved["m"]) and got["k"] == 2
        # The local share does not fit, nor does the durable step.
        with pytest.raises(ckpt.InvalidArgument, match='no entry "k"'):
            t.restore({"m": torch.zeros(6, dtype=torch.bfloat16)},
                      strict=True)
        # The whole state does, strictly too.
        got = {"m": torch.zeros(6, dtype=torch.bfloat16), "k": 0}
        assert t.restore(got, strict=True).tier == "local"
        assert torch.equal(got["m"], saved["m"]) and got["k"] == 2


def test_bad_arguments_are_named_as_python_spells_them(root, local):
    mgr = ckpt.open(root, create=True)
    for kwargs, named in [({"local_every": -1}, "local_every=-1"),
                          ({"keep": 0}, "keep=0"),
                          ({"replicas": -2}, "replicas=-2"),
                          ({"replication_rate": -1.0}, "replication_rate=-1.0"),
                          ({"local_every": 1.5}, "local_every=1.5")]:
        with pytest.raises(ckpt.InvalidArgument, match=re.escape(named)):
            mgr.tiers(local, **kwargs)
    with pytest.warns(RuntimeWarning, match="every save is skipped"):
        t = mgr.tiers(local, local_every=0, durable_every=0, replicas=0)
    t.close()


def test_a_local_tier_that_cannot_be_opened_is_named(root, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_bytes(b"x")
    with pytest.raises(ckpt.InvalidArgument, match="not-a-folder"):
        ckpt.open(root).tiers(f"file://{blocker}/local", replicas=0)


def test_a_failing_local_tier_is_reported_and_the_durable_save_stands(
        root, tmp_path, local):
    with ckpt.open(root).tiers(local, local_every=1, durable_every=1,
                               replicas=0) as t:
        # The node's tier breaks after the job started.
        shutil.rmtree(tmp_path / "local")
        (tmp_path / "local").write_bytes(b"x")
        r = t.save(1, state_at(1))
    assert not r.local and r.local_error
    assert r.durable and r.durable_result.info.step == 1


def test_replicas_without_another_node_are_refused(root, local):
    with pytest.raises(ckpt.InvalidArgument, match="replica"):
        ckpt.open(root).tiers(local, replicas=1)
    with pytest.raises(ckpt.InvalidArgument, match="replication"):
        ckpt.open(root).tiers(local, replicas=0, replication_rate=-5)


def test_the_default_replicas_on_one_node_is_none_and_says_so(tmp_path):
    # One machine, one node: the default saves without a replica, and the
    # log (at info) says which was chosen and why.
    script = (
        "import sys, numpy as np, ckpt\n"
        "root, local = sys.argv[1], sys.argv[2]\n"
        "with ckpt.open(root).tiers(local) as t:\n"
        "    r = t.save(1, {'w': np.ones(4, dtype=np.float32)})\n"
        "    assert r.local and r.local_error == '', r.local_error\n"
        "    assert r.replicated_bytes == 0\n")
    env = dict(os.environ, CKPT_LOG="info")
    done = subprocess.run(
        [sys.executable, "-c", script, f"file://{tmp_path}/root",
         f"file://{tmp_path}/local"], env=env, capture_output=True, text=True,
        timeout=120)
    assert done.returncode == 0, done.stderr
    assert "tiers: replicas 0 (the default on one node)" in done.stderr
    assert "the job runs on one node" in done.stderr


def test_a_closed_tiers_object_says_so(root, local):
    t = ckpt.open(root).tiers(local, replicas=0)
    t.close()
    with pytest.raises(ckpt.FailedPrecondition, match="closed"):
        t.save(1, state_at(1))


def test_under_torchrun_a_lost_node_recovers_from_its_peer(tmp_path):
    torchrun_util.skip_without_torchrun("test_tiers.py (torchrun)")
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "torchrun_job.py")
    root = str(tmp_path / "durable")
    local = f"file://{tmp_path}/node{{node}}"

    def run(n, *ops):
        rc, out, err = torchrun_util.torchrun(n, job, ops)
        assert rc == 0, f"torchrun -n {n} {ops} exited {rc}:\n{out}{err}"

    run(2, "tiers", root, local)
    # Node 1 replaced by an empty one: its rank's share comes from node 0.
    shutil.rmtree(tmp_path / "node1")
    run(2, "trestore", root, local, "local", 4, 1)
    # The copy was written back on node 1: nothing to fetch any more.
    run(2, "trestore", root, local, "local", 4, 0)
    # One rank on node 0, which holds both shares, reshards step 4 from
    # the local tier.
    run(1, "trestore", root, local, "local", 4, 0)
