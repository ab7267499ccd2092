"""consolidate(): a checkpoint as Hugging Face safetensors files.

Every file is read back with this file's own safetensors reader, written
from the format's description (an 8-byte little-endian header length, a
JSON header, a data section the tensors tile exactly), and, where
CKPT_CLI names the ckpt binary, imported with `ckpt import` and loaded
again; both must give back the saved bytes exactly.
"""

import json
import math
import inspect
import os
import struct
import subprocess
import warnings

import numpy as np
import pytest

import ckpt
from ckpt import _consolidate
from ckpt._consolidate import consolidate

try:
    import torch
except ImportError:
    torch = None
    # A warning too: pytest -q prints warnings, not the reasons of skips.
    warnings.warn(pytest.PytestWarning(
        "test_consolidate.py: torch is not importable; the bfloat16 tensor "
        "is left out of the checkpoints"))


# ------------------------------------------------- a reader from the spec

# safetensors dtype -> the NumPy dtype of its bytes (BF16: its raw bits).
NUMPY_OF = {"BOOL": "|b1", "U8": "|u1", "I8": "|i1", "U16": "<u2",
            "I16": "<i2", "U32": "<u4", "I32": "<i4", "U64": "<u8",
            "I64": "<i8", "F16": "<f2", "BF16": "<u2", "F32": "<f4",
            "F64": "<f8"}


def read_safetensors(path):
    """(the __metadata__ map, {name: (dtype, shape, bytes, offset)}) of a
    safetensors file, checking its layout on the way."""
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) >= 8, path
    (n,) = struct.unpack("<Q", data[:8])
    assert 8 + n <= len(data), path
    # Our writer pads the header with spaces to an 8-byte boundary.
    assert (8 + n) % 8 == 0, path
    text = data[8:8 + n].decode("utf-8")
    assert text.startswith("{") and text.rstrip(" ").endswith("}"), path
    header = json.loads(text)
    meta = header.pop("__metadata__", {})
    assert all(isinstance(k, str) and isinstance(v, str)
               for k, v in meta.items()), path
    body = data[8 + n:]
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], name)
                   for name, v in header.items())
    end = 0
    for begin, stop, name in spans:
        assert begin == end, f"{path}: {name} does not start where the " \
                             f"tensor before it ends"
        assert stop >= begin, name
        end = stop
    assert end == len(body), f"{path}: the tensors do not fill the data " \
                             f"section exactly"
    tensors = {}
    for name, v in header.items():
        assert set(v) == {"dtype", "shape", "data_offsets"}, name
        dtype = np.dtype(NUMPY_OF[v["dtype"]])
        begin, stop = v["data_offsets"]
        count = math.prod(v["shape"])
        assert stop - begin == count * dtype.itemsize, name
        if count:
            array = np.frombuffer(body, dtype=dtype, count=count,
                                  offset=begin).reshape(v["shape"])
        else:
            array = np.empty(v["shape"], dtype)
        tensors[name] = (v["dtype"], list(v["shape"]), array.tobytes(), begin)
    return meta, tensors


# ------------------------------------------------------------- the states

DTYPE_NAME = {np.dtype(np.bool_): "BOOL", np.dtype(np.uint8): "U8",
              np.dtype(np.int32): "I32", np.dtype(np.int64): "I64",
              np.dtype(np.float16): "F16", np.dtype(np.float32): "F32",
              np.dtype(np.float64): "F64"}


def random_array(rng, dtype, shape):
    """Random bits (NaNs and infinities included), or random booleans."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    n = math.prod(shape) * dtype.itemsize
    return np.frombuffer(rng.bytes(n), dtype).reshape(shape).copy()


def make_state(seed=0):
    rng = np.random.default_rng(seed)
    state = {
        "model": {
            "fc": {"weight": random_array(rng, np.float32, (6, 5)),
                   "bias": random_array(rng, np.float32, (6,))},
            "emb.weight": random_array(rng, np.float16, (10, 4)),
            "layers": [{"w": random_array(rng, np.float64, (3, 3))},
                       {"w": random_array(rng, np.float64, (3, 3))}],
            "mask": random_array(rng, np.bool_, (13,)),
            "ids": random_array(rng, np.int64, (7,)),
            "empty": random_array(rng, np.float32, (0, 3)),
            "scale": random_array(rng, np.float32, ()),
            "big": random_array(rng, np.float32, (100,)),
            "calls": 3,
        },
        "optimizer": {"m": random_array(rng, np.float32, (6, 5)),
                      "step": 10, "lr": 0.5},
        "counts": random_array(rng, np.uint8, (5,)),
        "vocab": b"a blob: not a tensor",
        "name": "run",
        "nothing": None,
        "config": ckpt.Metadata({"hidden": 5, "act": "gelu"}),
        "loader": ckpt.RankLocal(np.arange(3, dtype=np.int32)),
    }
    if torch is not None:
        g = torch.Generator().manual_seed(seed)
        bits = torch.randint(-2**15, 2**15, (4, 4), dtype=torch.int16,
                             generator=g)
        state["model"]["half"] = bits.view(torch.bfloat16)
    return state


def expected_tensors(state):
    """{dotted name: (dtype, shape, bytes)} of the global tensors of a
    state: what consolidate must write."""
    out = {}

    def walk(value, path):
        if isinstance(value, dict) and not isinstance(value, ckpt.Metadata):
            for k, v in value.items():
                walk(v, path + [str(k)])
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(v, path + [str(i)])
        elif isinstance(value, np.ndarray):
            out[".".join(path)] = (DTYPE_NAME[value.dtype], list(value.shape),
                                   value.tobytes())
        elif torch is not None and isinstance(value, torch.Tensor):
            assert value.dtype == torch.bfloat16
            out[".".join(path)] = ("BF16", list(value.shape),
                                   value.view(torch.int16).numpy().tobytes())

    walk(state, [])
    return out


def without_offsets(tensors):
    return {name: t[:3] for name, t in tensors.items()}


@pytest.fixture
def saved(root):
    """The root, with make_state() saved as step 1."""
    state = make_state()
    ckpt.open(root).save(1, state)
    return root, expected_tensors(state)


def no_temporaries(directory):
    return not [n for n in os.listdir(directory) if ".ckpt-tmp-" in n]


# ------------------------------------------------------------------ tests

def test_single_file(saved, tmp_path):
    root, expected = saved
    assert "model.big" in expected and "vocab" not in expected
    assert "loader" not in expected and "config" not in expected
    out = tmp_path / "out"
    paths = consolidate(root, out, metadata={"source": "ckpt test"})
    assert paths == [str(out / "model.safetensors")]
    assert os.listdir(out) == ["model.safetensors"]
    meta, tensors = read_safetensors(paths[0])
    assert meta == {"format": "pt", "source": "ckpt test"}
    assert without_offsets(tensors) == expected
    # Every tensor starts at a multiple of its element size.
    for name, (dtype, _, _, offset) in tensors.items():
        assert offset % np.dtype(NUMPY_OF[dtype]).itemsize == 0, name


def test_step_and_manager(root, tmp_path):
    mgr = ckpt.open(root)
    first, second = make_state(1), make_state(2)
    mgr.save(1, first)
    mgr.save(2, second)
    consolidate(mgr, tmp_path / "one", step=1)
    consolidate(root, tmp_path / "newest")
    _, one = read_safetensors(tmp_path / "one" / "model.safetensors")
    _, newest = read_safetensors(tmp_path / "newest" / "model.safetensors")
    assert without_offsets(one) == expected_tensors(first)
    assert without_offsets(newest) == expected_tensors(second)
    assert one != newest


def check_sharded(out, paths, expected, limit, entry_order):
    """The files of a sharded consolidate: names, index, sizes, contents."""
    *shards, index_path = paths
    assert index_path == str(out / "model.safetensors.index.json")
    n = len(shards)
    assert n >= 3
    names = [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    assert shards == [str(out / name) for name in names]
    assert sorted(os.listdir(out)) == sorted(names + [
        "model.safetensors.index.json"])
    with open(index_path) as f:
        text = f.read()
    index = json.loads(text)
    assert index["metadata"] == {"total_size": sum(
        len(t[2]) for t in expected.values())}
    assert set(index["weight_map"]) == set(expected)
    assert list(index["weight_map"]) == sorted(index["weight_map"])
    found = {}
    for name, path in zip(names, shards):
        meta, tensors = read_safetensors(path)
        assert meta == {"format": "pt"}
        data = sum(len(t[2]) for t in tensors.values())
        assert data <= limit or len(tensors) == 1, name
        for tensor in tensors:
            assert index["weight_map"][tensor] == name
        assert not set(tensors) & set(found)
        found.update(tensors)
    assert without_offsets(found) == expected
    # Distributed in the checkpoint's entry order.
    files = [index["weight_map"][name] for name in entry_order
             if name in expected]
    assert files == sorted(files)


def test_sharded(saved, tmp_path):
    root, expected = saved
    entry_order = [e.name for e in ckpt.open(root).describe().entries]
    out = tmp_path / "out"
    # model.big (400 bytes) is larger than the limit: a file of its own.
    paths = consolidate(root, out, max_shard_size="200B")
    check_sharded(out, paths, expected, 200, entry_order)
    assert any(list(read_safetensors(p)[1]) == ["model.big"]
               for p in paths[:-1])


@pytest.mark.parametrize("text,size", [
    ("5GB", 5 * 10**9), ("500MB", 500 * 10**6), ("2GiB", 2 * 2**30),
    ("1.5KB", 1500), (" 64 KiB ", 64 * 1024), ("100", 100), (1234, 1234),
    (np.int64(7), 7)])
def test_shard_size(text, size):
    assert _consolidate._shard_size(text) == size


@pytest.mark.parametrize("bad", [0, -1, "0GB", "5Gb", "five", "5 GB GB",
                                 "5XB", True, 1.5, None])
def test_bad_shard_size(saved, tmp_path, bad):
    root, _ = saved
    with pytest.raises(ckpt.InvalidArgument, match="max_shard_size"):
        consolidate(root, tmp_path / "out", max_shard_size=bad)
    assert not (tmp_path / "out").exists()


def test_default_shard_size_is_5gb(saved, tmp_path):
    default = inspect.signature(consolidate).parameters["max_shard_size"]
    assert default.default == _consolidate._shard_size("5GB") == 5 * 10**9
    root, _ = saved
    paths = consolidate(root, tmp_path / "out", max_shard_size="5GB")
    assert [os.path.basename(p) for p in paths] == ["model.safetensors"]


def test_prefix(saved, tmp_path):
    root, expected = saved
    out = tmp_path / "out"
    paths = consolidate(root, out, prefix="model.")
    _, tensors = read_safetensors(paths[0])
    want = {name[len("model."):]: t for name, t in expected.items()
            if name.startswith("model.")}
    assert "fc.weight" in want and "emb.weight" in want
    assert without_offsets(tensors) == want

    # Sharded too, with the prefix stripped in the index.
    out2 = tmp_path / "out2"
    paths = consolidate(root, out2, prefix="model.", max_shard_size=150)
    order = [e.name[len("model."):] for e in ckpt.open(root).describe().entries
             if e.name.startswith("model.")]
    check_sharded(out2, paths, want, 150, order)


def test_prefix_that_selects_nothing(saved, tmp_path):
    root, _ = saved
    out = tmp_path / "out"
    with pytest.raises(ckpt.NotFound) as e:
        consolidate(root, out, prefix="decoder.")
    message = str(e.value)
    assert "step 1" in message and "'decoder.'" in message
    assert os.path.basename(root) in message
    assert not out.exists()
    # A blob or a metadata entry is not a tensor.
    with pytest.raises(ckpt.NotFound):
        consolidate(root, out, prefix="vocab")
    with pytest.raises(ckpt.NotFound):
        consolidate(root, out, prefix="config")
    # Nor is a rank-local entry.
    with pytest.raises(ckpt.NotFound):
        consolidate(root, out, prefix="loader")
    assert not out.exists()


def test_checkpoint_without_tensors(root, tmp_path):
    ckpt.open(root).save(3, {"blob": b"x", "epoch": 2})
    with pytest.raises(ckpt.NotFound, match="step 3"):
        consolidate(root, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_missing_root_and_step(saved, tmp_path):
    root, _ = saved
    with pytest.raises(ckpt.NotFound, match="step 7"):
        consolidate(root, tmp_path / "out", step=7)
    with pytest.raises(ckpt.Error):
        consolidate(str(tmp_path / "no-such-root"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_refuses_existing_files(saved, tmp_path):
    root, expected = saved
    out = tmp_path / "out"
    single = out / "model.safetensors"
    consolidate(root, out)
    before = single.read_bytes()
    with pytest.raises(ckpt.AlreadyExists, match="model.safetensors"):
        consolidate(root, out, metadata={"again": "yes"})
    assert single.read_bytes() == before
    assert os.listdir(out) == ["model.safetensors"]
    consolidate(root, out, metadata={"again": "yes"}, overwrite=True)
    meta, tensors = read_safetensors(single)
    assert meta["again"] == "yes" and without_offsets(tensors) == expected
    assert os.listdir(out) == ["model.safetensors"]

    # A sharded layout beside a model.safetensors, which loaders would open
    # instead: refused, or with overwrite the old file goes.
    with pytest.raises(ckpt.AlreadyExists, match="model.safetensors"):
        consolidate(root, out, max_shard_size=200)
    assert os.listdir(out) == ["model.safetensors"]
    paths = consolidate(root, out, max_shard_size=200, overwrite=True)
    assert not single.exists()
    entry_order = [e.name for e in ckpt.open(root).describe().entries]
    check_sharded(out, paths, expected, 200, entry_order)

    # One existing shard is enough to refuse.
    with pytest.raises(ckpt.AlreadyExists, match="model-00001-of"):
        consolidate(root, out, max_shard_size=200)
    assert no_temporaries(out)


def test_nothing_left_behind_on_error(saved, tmp_path, monkeypatch):
    root, _ = saved
    calls = []
    real = ckpt.CheckpointManager.load_into

    def failing(self, state, step=None, **kw):
        calls.append(sorted(state))
        if len(calls) == 2:
            raise ckpt.DataLoss("injected failure")
        return real(self, state, step, **kw)

    monkeypatch.setattr(ckpt.CheckpointManager, "load_into", failing)

    # A directory consolidate creates goes too.
    out = tmp_path / "out"
    with pytest.raises(ckpt.DataLoss) as e:
        consolidate(root, out, max_shard_size=200)
    assert "injected failure" in str(e.value)
    assert "step 1" in str(e.value) and "model-00002-of-" in str(e.value)
    assert len(calls) == 2
    assert not out.exists()

    # In an existing directory, only what was there stays.
    calls.clear()
    out.mkdir()
    (out / "README").write_text("mine\n")
    with pytest.raises(ckpt.DataLoss):
        consolidate(root, out, max_shard_size=200)
    assert os.listdir(out) == ["README"]

    # The files an overwrite would replace are left as they were.
    monkeypatch.setattr(ckpt.CheckpointManager, "load_into", real)
    paths = consolidate(root, out, max_shard_size=200)
    before = {p: open(p, "rb").read() for p in paths}
    monkeypatch.setattr(ckpt.CheckpointManager, "load_into", failing)
    calls.clear()
    with pytest.raises(ckpt.DataLoss):
        consolidate(root, out, max_shard_size=200, overwrite=True,
                    metadata={"new": "1"})
    assert {p: open(p, "rb").read() for p in paths} == before
    assert sorted(os.listdir(out)) == sorted(
        ["README"] + [os.path.basename(p) for p in paths])


def test_file_that_appears_meanwhile(saved, tmp_path, monkeypatch):
    # A file made by someone else after the check, before this call puts
    # its own in place: never clobbered, and what this call had placed
    # already goes again.
    root, _ = saved
    out = tmp_path / "out"
    out.mkdir()
    real, calls = os.link, []

    def racing(src, dst, *args, **kw):
        calls.append(dst)
        if len(calls) == 2:
            with open(dst, "w") as f:
                f.write("theirs\n")
        return real(src, dst, *args, **kw)

    monkeypatch.setattr(os, "link", racing)
    with pytest.raises(ckpt.AlreadyExists, match="model-00002-of-"):
        consolidate(root, out, max_shard_size=200)
    assert len(calls) == 2
    assert os.listdir(out) == [os.path.basename(calls[1])]
    assert open(calls[1]).read() == "theirs\n"


def test_bad_arguments(saved, tmp_path):
    root, _ = saved
    out = tmp_path / "out"
    with pytest.raises(ckpt.InvalidArgument, match="metadata"):
        consolidate(root, out, metadata={"n": 1})
    with pytest.raises(ckpt.InvalidArgument, match="prefix"):
        consolidate(root, out, prefix=3)
    assert not out.exists()
    (tmp_path / "file").write_text("")
    with pytest.raises(ckpt.InvalidArgument, match="not a directory"):
        consolidate(root, tmp_path / "file")


# ------------------------------------------------- back through ckpt import

def loaded_tensors(root):
    """{dotted name: (dtype, shape, bytes)} of a checkpoint, by load()."""
    mgr = ckpt.open(root, create=False)
    entries = {e.name: e for e in mgr.describe().entries}
    with warnings.catch_warnings():
        # BF16 without torch loads as uint16 bits, with a warning.
        warnings.simplefilter("ignore")
        state = mgr.load()
    out = {}

    def walk(value, path):
        if isinstance(value, dict) and not isinstance(value, ckpt.Metadata):
            for k, v in value.items():
                walk(v, path + [str(k)])
            return
        name = ".".join(path)
        e = entries[name]
        assert e.kind == "tensor", name
        if torch is not None and isinstance(value, torch.Tensor):
            value = value.view(torch.int16).numpy()
        out[name] = (e.dtype, list(e.shape), value.tobytes())

    walk(state, [])
    return out


def test_ckpt_import_reads_back(saved, tmp_path, ckpt_cli):
    cli = ckpt_cli
    root, expected = saved
    single = consolidate(root, tmp_path / "single")
    sharded = consolidate(root, tmp_path / "sharded", max_shard_size=200)
    assert len(sharded) >= 4
    files = single + sharded[:-1]
    together = {}
    for i, path in enumerate(files):
        imported = str(tmp_path / f"imported-{i}")
        run = subprocess.run([cli, "import", path, imported, "--step", "5"],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        _, tensors = read_safetensors(path)
        got = loaded_tensors(imported)
        assert got == without_offsets(tensors), path
        info = ckpt.open(imported, create=False).list()
        assert [c.step for c in info] == [5]
        assert info[0].metadata == {"format": "pt"}
        if i == 0:
            assert got == expected
        else:
            together.update(got)
    assert together == expected
