"""The catalog and many ranks from Python: ckpt.Catalog, catalog=,
ckpt.mpi_communicator(), ckpt.Shard and ckpt.RankLocal."""

import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

import ckpt

HERE = os.path.dirname(os.path.abspath(__file__))


def test_saves_are_recorded_in_the_catalog(root, tmp_path):
    url = str(tmp_path / "catalog.sqlite")
    mgr = ckpt.open(root, catalog=url, job_id="run-a", keep_last=2)
    for step, loss in [(1, 0.9), (2, 0.4), (3, 0.6)]:
        mgr.save(step, {"x": np.full(3, step)}, epoch=step, metrics={"loss": loss})
    cat = ckpt.Catalog(url)
    assert repr(cat) == f"ckpt.Catalog({cat.url!r})" and url in cat.url
    latest = cat.latest("run-a")
    assert (latest.step, latest.epoch, latest.state) == (3, 3, "committed")
    assert latest.root.endswith("/root") and latest.world_size == 1
    # keep_last=2 deleted step 1 and the catalog says so.
    assert [c.step for c in cat.list("run-a")] == [2, 3]
    assert [(c.step, c.state) for c in cat.list("run-a", include_deleted=True)
            ] == [(1, "deleted"), (2, "committed"), (3, "committed")]
    assert cat.best("run-a", "loss").step == 2
    assert cat.best("run-a", "loss", higher_is_better=True).step == 3
    assert cat.best("run-a", "accuracy") is None
    assert cat.latest("no-such-job") is None
    assert [(j.job_id, j.committed, j.latest_step) for j in cat.jobs()
            ] == [("run-a", 2, 3)]


def test_a_job_is_found_by_its_root_as_the_command_line_finds_it(
        tmp_path, monkeypatch):
    # A root given as a path names the job that saved under it, whatever
    # its id, and answers from that root alone: a copy of the root that
    # runs on under the same job id is not where the first root resumes.
    url = str(tmp_path / "catalog.sqlite")
    first, copy = tmp_path / "first", tmp_path / "copy"
    with ckpt.open(first, catalog=url, job_id="run-p") as mgr:
        mgr.save(3, {"x": np.arange(3)}, metrics={"loss": 0.5})
    with ckpt.open(copy, catalog=url, job_id="run-p") as mgr:
        mgr.save(5, {"x": np.arange(3)}, metrics={"loss": 0.1})
    cat = ckpt.Catalog(url)
    assert cat.latest("run-p").step == 5
    monkeypatch.chdir(tmp_path)
    for job in (str(first), first, "./first", "file://" + str(first)):
        for check in (True, False):
            assert cat.latest(job, check=check).step == 3, (job, check)
            assert cat.best(job, "loss", check=check).step == 3, (job, check)
        assert [c.step for c in cat.list(job)] == [3], job
    assert cat.latest(copy).step == 5
    assert [c.step for c in cat.list(root="first")] == [3]
    # Two jobs under one root: which one is meant is not guessed.
    with ckpt.open(first, catalog=url, job_id="run-q") as mgr:
        mgr.save(4, {"x": np.arange(3)})
    with pytest.raises(ckpt.FailedPrecondition, match=r"run-p.*run-q"):
        cat.latest(first)
    assert cat.latest("run-q").step == 4


def test_a_bare_folder_name_that_is_no_job_says_how_to_name_the_root(
        tmp_path, monkeypatch):
    # ckpt.open("run") records the job "file:///.../run", and its mgr.url
    # is "run", which the catalog reads as a job id: None, with a warning
    # that says how to name the root.
    monkeypatch.chdir(tmp_path)
    url = str(tmp_path / "catalog.sqlite")
    with ckpt.open("run", catalog=url, create=True) as mgr:
        mgr.save(1, {"x": np.arange(3)}, metrics={"loss": 0.5})
        assert mgr.url == "run"
    cat = ckpt.Catalog(url)
    for call in (lambda j: cat.latest(j), lambda j: cat.latest(j, check=False),
                 lambda j: cat.best(j, "loss")):
        with pytest.warns(RuntimeWarning, match=r"no job of that id; a "
                          r"folder 'run' is here.*'\./run'"):
            assert call("run") is None
        assert call("./run").step == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cat.latest("no-such-job") is None  # no such folder: silent


def test_a_catalog_that_is_not_there_is_not_found_unless_created(tmp_path):
    path = tmp_path / "nope" / "cat.sqlite"
    with pytest.raises(ckpt.NotFound, match=r"nope/cat.sqlite.*not there"):
        ckpt.Catalog(str(path))
    assert not (tmp_path / "nope").exists()  # nothing made by a query
    assert ckpt.Catalog(str(path), create=True).jobs() == []
    assert ckpt.Catalog(str(path)).jobs() == []


def test_latest_and_best_skip_rows_storage_no_longer_holds(root, tmp_path):
    url = str(tmp_path / "catalog.sqlite")
    mgr = ckpt.open(root, catalog=url, job_id="run-s")
    for step, loss in [(1, 0.5), (2, 0.1), (3, 0.3), (4, 0.2)]:
        mgr.save(step, {"x": np.full(3, step)}, metrics={"loss": loss})
    mgr.close()
    # Steps 4 and 2 removed behind the catalog's back.
    for step in (4, 2):
        shutil.rmtree(os.path.join(root, f"step-{step:012d}"))
    cat = ckpt.Catalog(url)
    with pytest.warns(RuntimeWarning, match="skipping step 4 of job 'run-s'"):
        assert cat.latest("run-s").step == 3
    with pytest.warns(RuntimeWarning, match="skipping step 2"):
        assert cat.best("run-s", "loss").step == 3
    assert cat.best("run-s", "loss", higher_is_better=True).step == 1
    # The catalog alone, when asked.
    assert cat.latest("run-s", check=False).step == 4
    assert cat.best("run-s", "loss", check=False).step == 2
    # Every row stale: None, as for a job without checkpoints.
    for step in (1, 3):
        shutil.rmtree(os.path.join(root, f"step-{step:012d}"))
    with pytest.warns(RuntimeWarning):
        assert cat.latest("run-s") is None


def test_one_catalog_object_serves_many_managers(tmp_path):
    cat = ckpt.Catalog(str(tmp_path / "c.sqlite"), create=True)
    for job in ("a", "b"):
        ckpt.open(str(tmp_path / job), catalog=cat, job_id=job).save(
            5, {"v": np.zeros(2)})
    assert sorted(j.job_id for j in cat.jobs()) == ["a", "b"]


def test_catalog_true_is_the_default_catalog(root, tmp_path, monkeypatch):
    url = str(tmp_path / "default.sqlite")
    monkeypatch.setenv("CKPT_CATALOG", url)
    ckpt.open(root, catalog=True, job_id="dflt").save(9, {"v": np.ones(1)})
    assert ckpt.Catalog().url.endswith("default.sqlite")
    assert ckpt.Catalog(url).latest("dflt").step == 9


def test_a_bad_catalog_url_names_it(root):
    with pytest.raises(ckpt.InvalidArgument, match="mysql://db/x"):
        ckpt.open(root, catalog="mysql://db/x")


@pytest.mark.parametrize("kind", ["garbage", "directory"])
def test_an_unreadable_catalog_is_a_warning_unless_required(
        root, tmp_path, capfd, kind):
    bad = tmp_path / "catalog.sqlite"
    if kind == "garbage":
        bad.write_bytes(b"not a SQLite database\n" * 100)
    else:
        bad.mkdir()
    mgr = ckpt.open(root, catalog=bad, job_id="job")
    mgr.save(1, {"x": np.arange(3)})
    mgr.save(2, {"x": np.arange(3) + 2})
    err = capfd.readouterr().err
    assert err.count("warning") == 1, err
    assert str(bad) in err
    # Storage alone resumes the job.
    again = ckpt.open(root, catalog=bad, job_id="job")
    assert again.latest() == 2
    assert np.array_equal(again.load()["x"], np.arange(3) + 2)
    capfd.readouterr()
    with pytest.raises(ckpt.Error, match="catalog is required.*" + str(bad)):
        ckpt.open(root, catalog=bad, job_id="job", catalog_required=True)


def test_rank_local_values_at_one_rank(mgr):
    pos = np.array([41, 42], dtype=np.int64)
    mgr.save(1, {"loader": {"pos": ckpt.RankLocal(pos),
                            "rng": ckpt.RankLocal(b"state")}})
    assert mgr.rank == 0 and mgr.world_size == 1
    out = mgr.load()
    assert np.array_equal(out["loader"]["pos"], pos)
    assert out["loader"]["rng"] == b"state"
    target_pos = np.zeros(2, dtype=np.int64)
    target = {"loader": {"pos": ckpt.RankLocal(target_pos),
                         "rng": ckpt.RankLocal(b"")}}
    mgr.load_into(target)
    assert np.array_equal(target_pos, pos)  # filled in place
    assert target["loader"]["rng"].value == b"state"
    all_pos = mgr.load_rank_local("loader.pos")
    assert list(all_pos) == [0] and np.array_equal(all_pos[0], pos)
    assert mgr.load_rank_local("loader.rng") == {0: b"state"}
    with pytest.raises(ckpt.NotFound, match="nothing"):
        mgr.load_rank_local("nothing")


def test_a_shard_that_is_the_whole_tensor(mgr):
    w = np.arange(12, dtype=np.float64).reshape(3, 4)
    mgr.save(1, {"w": ckpt.Shard(w, [0, 0], [3, 4])})
    assert np.array_equal(mgr.load()["w"], w)
    part = np.zeros((2, 2))
    mgr.load_into({"w": ckpt.Shard(part, [1, 2], [3, 4])})
    assert np.array_equal(part, w[1:3, 2:4])


def test_bad_shards_are_refused(mgr):
    with pytest.raises(ckpt.InvalidArgument, match="'w'"):
        mgr.save(1, {"w": ckpt.Shard(np.zeros(3), [0, 0], [3])})
    with pytest.raises(ckpt.InvalidArgument, match="w"):
        mgr.save(1, {"w": ckpt.Shard(np.zeros(3), [2], [3])})  # out of bounds
    with pytest.raises(ckpt.InvalidArgument, match="s"):
        mgr.save(1, {"s": ckpt.Shard(b"bytes", [0], [5])})
    assert mgr.latest() is None


def _mpirun(n, *args):
    mpiexec = os.environ.get("CKPT_MPIEXEC")
    cmd = [mpiexec, "--allow-run-as-root", "--oversubscribe", "--mca", "btl",
           "self,vader", "--mca", "plm_rsh_agent", "false", "-np", str(n),
           sys.executable, os.path.join(HERE, "mpi_job.py"), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_many_ranks_under_mpirun(root, tmp_path):
    # CMake sets CKPT_MPIEXEC where it found MPI, as it does where
    # scripts/install-deps.sh ran (it installs Open MPI).
    assert "CKPT_MPIEXEC" in os.environ, (
        "the build found no MPI: run scripts/install-deps.sh and configure "
        "again")
    assert ckpt.HAS_MPI  # CMake found MPI, so the module must have it
    catalog = str(tmp_path / "catalog.sqlite")
    _mpirun(2, "save", root, catalog)
    for n in (1, 2, 3):
        _mpirun(n, "load", root, "2")
    # A single process sees the same checkpoint.
    mgr = ckpt.open(root, create=False)
    info = mgr.list()[-1]
    assert (info.step, info.world_size, len(info.hosts)) == (7, 2, 2)
    assert mgr.load_rank_local("rng") == {0: b"rng of rank 0",
                                          1: b"rng of rank 1"}
    row = ckpt.Catalog(catalog).latest("mpi-job")
    assert (row.step, row.world_size, row.metrics) == (7, 2, {"loss": 0.25})


def test_mpi_timeout_names_the_rank_that_never_arrives():
    assert "CKPT_MPIEXEC" in os.environ, (
        "the build found no MPI: run scripts/install-deps.sh and configure "
        "again")
    out = _mpirun(2, "silent", "2")
    assert "MPI barrier: rank 0 (" in out
    assert "heard nothing from rank 1 (" in out


def test_mpi_timeout_must_be_seconds():
    for bad in (-1, float("nan"), float("inf"), "3", True):
        with pytest.raises(ckpt.InvalidArgument, match="timeout"):
            ckpt.mpi_communicator(timeout=bad)


def test_incremental_saves_write_only_what_changed(root):
    mgr = ckpt.open(root, chunk_size=4096, full_every=3)
    table = np.zeros((1024, 64), dtype=np.float32)  # 256 KiB, 64 chunks
    full = mgr.save(1, {"table": table}).info
    table[10] = 1.0
    second = mgr.save(2, {"table": table}, incremental=True).info
    assert (second.parent, second.chain, second.depends_on) == (1, 1, [1])
    assert second.bytes < full.bytes / 10
    table[900] = 2.0
    third = mgr.save(3, {"table": table}, incremental=True,
                     dirty_rows={"table": [(900, 901)]}).info
    assert third.chain == 2 and third.bytes < full.bytes / 10
    fourth = mgr.save(4, {"table": table}, incremental=True).info
    assert fourth.chain == 0 and fourth.depends_on == []  # full_every=3
    loaded = mgr.load(3)["table"]
    assert np.array_equal(loaded, table)
    with pytest.raises(ckpt.Error, match="3"):
        mgr.delete(2)  # step 3 depends on it
