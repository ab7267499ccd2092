"""Round trips of NumPy arrays, scalars, blobs and containers."""

import json
import math
import os
import subprocess

import numpy as np
import pytest

import ckpt

# Every NumPy dtype that has a safetensors dtype.
DTYPES = [np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.uint32,
          np.int32, np.uint64, np.int64, np.float16, np.float32, np.float64]


def random_array(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) *
                       np.dtype(dtype).itemsize, dtype=np.uint8)
    if dtype is np.bool_:
        raw = raw % 2
    return raw.view(dtype).reshape(shape)  # every bit pattern, NaNs included


def assert_same(a, b):
    assert isinstance(b, np.ndarray)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_round_trips(mgr, dtype):
    state = {"t": random_array(dtype, (3, 5)),
             "empty": np.zeros((0, 7), dtype),
             "scalar": random_array(dtype, ())}
    mgr.save(1, state)
    got = mgr.load()
    assert sorted(got) == ["empty", "scalar", "t"]
    for name, array in state.items():
        assert_same(array, got[name])
    assert got["scalar"].ndim == 0 and got["empty"].size == 0


def test_describe_names_the_safetensors_dtypes(mgr):
    mgr.save(1, {np.dtype(d).name: np.zeros(2, d) for d in DTYPES})
    kinds = {e.name: (e.kind, e.dtype, e.shape) for e in mgr.describe().entries}
    assert kinds["float16"] == ("tensor", "F16", [2])
    assert kinds["bool"] == ("tensor", "BOOL", [2])
    assert kinds["uint64"] == ("tensor", "U64", [2])


def test_loaded_arrays_own_their_memory(mgr):
    mgr.save(1, {"a": np.arange(10.0), "b": np.arange(4)})
    got = mgr.load()
    for a in got.values():
        assert a.flags.owndata and a.flags.writeable and a.flags.c_contiguous
    assert not np.shares_memory(got["a"], got["b"])


def test_every_kind_of_entry_interleaved_loads_in_order(mgr):
    # Whole tensors go to the library in runs between the other entries
    # (bytes, scalars, rank-local values, metadata): each run and each
    # entry between runs lands in its own place, empty and 0-d arrays too.
    state, expect = {}, {}
    for i in range(40):
        kind = i % 5
        name = f"e{i:02d}"
        if kind in (0, 1):
            dtype = DTYPES[i % len(DTYPES)]
            shape = [(), (0,), (3,), (2, 0, 4), (5, 7)][i % 5 if kind else 2]
            array = random_array(dtype, shape, seed=i)
            state[name] = expect[name] = array
        elif kind == 2:
            state[name] = expect[name] = bytes([i]) * i
        elif kind == 3:
            state[name] = expect[name] = {"n": i, "s": "x" * i}
        else:
            value = random_array(np.float32, (i,), seed=i)
            state[name] = ckpt.RankLocal(value)
            expect[name] = value
    mgr.save(1, state)
    for _ in range(2):  # the second with the manifest already read
        got = mgr.load()
        assert sorted(got) == sorted(expect)
        for name, want in expect.items():
            if isinstance(want, np.ndarray):
                assert_same(want, got[name])
            else:
                assert got[name] == want, name


def test_nested_dicts_are_flattened_and_rebuilt(mgr):
    state = {"model": {"layer1": {"weight": np.ones((2, 2), np.float32),
                                  "bias": np.zeros(2, np.float32)},
                       "layer2.weight": np.full(3, 2.0)},  # a dotted key
             "optimizer": {"state": {0: {"momentum": np.arange(3.0)}},
                           "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99),
                                             "params": [0, 1]}]},
             "empty": {}, "nothing": []}
    mgr.save(1, state)
    names = [e.name for e in mgr.describe().entries]
    assert "model.layer1.weight" in names and "model.layer2.weight" in names
    assert "optimizer.state.0.momentum" in names
    got = mgr.load()
    assert list(got) == list(state)
    assert list(got["model"]) == ["layer1", "layer2.weight"]
    assert_same(state["model"]["layer1"]["weight"],
                got["model"]["layer1"]["weight"])
    assert list(got["optimizer"]["state"]) == [0]  # an int key stays int
    assert got["optimizer"]["param_groups"] == [
        {"lr": 0.1, "betas": (0.9, 0.99), "params": [0, 1]}]
    assert got["empty"] == {} and got["nothing"] == []


@pytest.mark.parametrize("value", [
    0, -7, 2**63 - 1, -2**63, 2**100, -3**80, True, False, None, 0.1, -0.0,
    1e308, 5e-324, float("inf"), float("-inf"), "", "héllo ✓", "a\"b\\c\n"])
def test_scalars_come_back_as_the_same_python_value(mgr, value):
    mgr.save(1, {"v": value})
    got = mgr.load()["v"]
    assert type(got) is type(value)
    if isinstance(value, float):
        assert math.copysign(1, got) == math.copysign(1, value)
    assert got == value


def test_random_floats_survive_json_bit_for_bit(mgr):
    values = np.random.default_rng(1).standard_normal(200) * 10.0 ** \
        np.random.default_rng(2).integers(-300, 300, 200)
    mgr.save(1, {"f": [float(v) for v in values]})
    assert mgr.load()["f"] == [float(v) for v in values]


def test_nan_scalar(mgr):
    mgr.save(1, {"v": float("nan")})
    assert math.isnan(mgr.load()["v"])


def test_scalars_are_typed_metadata_entries(mgr):
    mgr.save(1, {"epoch": 3, "name": "run"})
    entries = {e.name: e for e in mgr.describe().entries}
    assert entries["epoch"].kind == "metadata"
    assert entries["epoch"].json == '{"python_type":"int","value":3}'
    assert entries["name"].json == '{"python_type":"str","value":"run"}'


def test_bytes_are_blobs(mgr):
    mgr.save(1, {"rng": bytes(range(256)), "ba": bytearray(b"xyz"),
                 "empty": b""})
    assert {e.name: e.kind for e in mgr.describe().entries}["rng"] == "blob"
    got = mgr.load()
    assert got == {"rng": bytes(range(256)), "ba": b"xyz", "empty": b""}


def test_metadata_objects_stay_one_entry(mgr):
    mgr.save(1, {"config": ckpt.Metadata(lr="0.1", layers=[1, 2])})
    entries = {e.name: e for e in mgr.describe().entries}
    assert entries["config"].kind == "metadata"
    got = mgr.load()["config"]
    assert isinstance(got, ckpt.Metadata)
    assert got == {"lr": "0.1", "layers": [1, 2]}


def test_non_contiguous_and_big_endian_arrays_are_copied(mgr):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    big = np.arange(5, dtype=">i4")
    mgr.save(1, {"t": base.T, "strided": base[:, ::2], "big": big})
    got = mgr.load()
    assert_same(np.ascontiguousarray(base.T), got["t"])
    assert_same(np.ascontiguousarray(base[:, ::2]), got["strided"])
    assert got["big"].dtype == np.dtype("<i4")
    assert (got["big"] == big).all()


def test_numpy_scalars_are_0d_arrays(mgr):
    mgr.save(1, {"f": np.float32(1.5), "b": np.bool_(True)})
    got = mgr.load()
    assert_same(np.array(1.5, np.float32), got["f"])
    assert_same(np.array(True), got["b"])


@pytest.mark.parametrize("value", [
    np.zeros(2, np.complex64), np.zeros(2, np.longdouble),
    np.array(["a"]), object(), {1.5: 2}, {"x": {True: 1}}, {"s": {1, 2}},
    {"m": ckpt.Metadata(x=object())}])
def test_unsupported_values_raise_invalid_argument(mgr, value):
    with pytest.raises(ckpt.InvalidArgument):
        mgr.save(1, {"v": value})
    assert mgr.latest() is None


def test_two_paths_making_one_name_are_refused(mgr):
    with pytest.raises(ckpt.InvalidArgument, match="both make the entry"):
        mgr.save(1, {"a.b": 1, "a": {"b": 2}})
    with pytest.raises(ckpt.InvalidArgument, match="reserved"):
        mgr.save(1, {"__python_tree__": 1})


def test_save_options_reach_the_manifest(mgr):
    mgr.save(4, {"x": np.zeros(1)}, metadata={"git": "abc"}, epoch=2,
             metrics={"loss": 0.5, "acc": 1})
    [info] = mgr.list()
    assert (info.step, info.epoch) == (4, 2)
    assert info.metadata == {"git": "abc"}
    assert info.metrics == {"loss": 0.5, "acc": 1.0}
    with pytest.raises(ckpt.InvalidArgument):
        mgr.save(5, {}, metadata={"n": 1})


def test_latest_list_delete(mgr, root):
    assert mgr.latest() is None and mgr.list() == []
    for step in (1, 2, 3):
        mgr.save(step, {"x": np.full(2, step)})
    assert mgr.latest() == 3
    assert [i.step for i in mgr.list()] == [1, 2, 3]
    folder = os.path.join(root, "step-000000000003")
    listed = {"step-000000000003/" + name:
              os.path.getsize(os.path.join(folder, name))
              for name in os.listdir(folder)}
    planned = mgr.delete(3, dry_run=True)
    assert planned["dry_run"] and os.listdir(folder)
    report = mgr.delete(3)
    assert report["step"] == 3 and not report["dry_run"]
    assert report["manifest_deleted"]
    assert {o["key"]: o["bytes"] for o in report["removed"]} == listed
    assert report["removed"][0]["key"] == "step-000000000003/MANIFEST.json"
    assert report["bytes_freed"] == sum(listed.values())
    assert report["kept"] == report["skipped"] == report["rewritten"] == []
    assert planned["removed"] == report["removed"]
    assert mgr.latest() == 2
    assert (mgr.load()["x"] == 2).all()
    assert (mgr.load(1)["x"] == 1).all()


def test_retention_keyword_arguments(root):
    mgr = ckpt.CheckpointManager(root, keep_last=2, keep_every_n_steps=5)
    deleted = []
    for step in range(1, 8):
        deleted += mgr.save(step, {"x": np.zeros(1)}).deleted_steps
    assert [i.step for i in mgr.list()] == [5, 6, 7]
    assert deleted == [1, 2, 3, 4]


def test_gc_applies_retention_on_demand(root):
    # Steps saved with no retention, then a manager that keeps the last 2
    # collects on demand.
    mgr = ckpt.open(root, create=True)
    for step in range(1, 5):
        mgr.save(step, {"x": np.zeros(1)})
    mgr.close()
    mgr = ckpt.open(root, keep_last=2)
    planned = mgr.gc(dry_run=True)
    assert planned["deleted_steps"] == [1, 2]
    assert [i.step for i in mgr.list()] == [1, 2, 3, 4]
    done = mgr.gc()
    assert done["deleted_steps"] == [1, 2] and done["bytes_freed"] > 0
    assert [i.step for i in mgr.list()] == [3, 4]


def test_gc_reports_what_ckpt_gc_json_prints(root, ckpt_cli):
    mgr = ckpt.open(root, create=True)
    for step in range(1, 5):
        mgr.save(step, {"x": np.zeros(1)})
    mgr.close()
    run = subprocess.run(
        [ckpt_cli, "gc", root, "--keep-last", "2", "--dry-run", "--json"],
        capture_output=True, text=True, check=True, timeout=60)
    printed = json.loads(run.stdout)
    mgr = ckpt.open(root, keep_last=2)
    planned = mgr.gc(dry_run=True)
    assert planned == printed
    assert [r["step"] for r in planned["step_reports"]] == [2, 1]
    done = mgr.gc()
    assert set(done) == set(printed) and done["dry_run"] is False
    assert [r["step"] for r in done["step_reports"]] == [2, 1]
    assert sum(r["bytes_freed"] for r in done["step_reports"]) \
        == done["bytes_freed"]


def test_keep_best(root):
    mgr = ckpt.open(root, keep_best=1, best_metric="acc",
                    best_higher_is_better=True, keep_last=1)
    for step, acc in [(1, 0.5), (2, 0.9), (3, 0.7), (4, 0.6)]:
        mgr.save(step, {"x": np.zeros(1)}, metrics={"acc": acc})
    assert [i.step for i in mgr.list()] == [2, 4]


def test_keep_best_by_a_metric_no_checkpoint_has_deletes_nothing(root, capfd):
    # "Loss" where the saves give "loss": ranked by nothing, the best
    # (step 1) would go with step 2.
    mgr = ckpt.open(root, keep_best=1, best_metric="Loss", keep_last=1)
    for step, loss in [(1, 0.1), (2, 0.5), (3, 0.9)]:
        mgr.save(step, {"x": np.zeros(1)}, metrics={"loss": loss})
    assert [i.step for i in mgr.list()] == [1, 2, 3]
    err = capfd.readouterr().err
    assert err.count('by metric "Loss", which no committed checkpoint') == 1
    assert 'their metrics: "loss"' in err


def test_min_seconds_between_saves_skips(root):
    mgr = ckpt.open(root, min_seconds_between_saves=3600)
    assert not mgr.save(1, {"x": np.zeros(1)}).skipped
    assert mgr.save(2, {"x": np.zeros(1)}).skipped
    assert mgr.latest() == 1


def test_mem_and_file_urls(tmp_path):
    mem = ckpt.open("mem://python-test")
    mem.save(1, {"x": np.arange(3)})
    assert (mem.load()["x"] == np.arange(3)).all()
    f = ckpt.open(tmp_path)  # a PathLike
    f.save(1, {"x": np.arange(3)})
    assert (ckpt.open("file://" + str(tmp_path)).load()["x"] ==
            np.arange(3)).all()


@pytest.mark.parametrize("layout", ["indexed", "json"])
def test_either_metadata_layout_round_trips(tmp_path, layout):
    state = {"w": random_array(np.float32, (64, 3)), "n": 7}
    m = ckpt.open(tmp_path / "root", metadata_layout=layout)
    m.save(1, state)
    step_dir = tmp_path / "root" / "step-000000000001"
    indexed = any(p.suffix == ".ckptdir" for p in step_dir.iterdir())
    assert indexed == (layout == "indexed")
    # Any layout loads whatever the manager's own setting.
    other = "json" if layout == "indexed" else "indexed"
    got = ckpt.open(tmp_path / "root", metadata_layout=other).load()
    assert_same(state["w"], got["w"])
    assert got["n"] == 7


def test_an_unknown_metadata_layout_is_refused_by_name(tmp_path):
    with pytest.raises(Exception, match="metadata_layout"):
        ckpt.open(tmp_path / "root", metadata_layout="xml")
