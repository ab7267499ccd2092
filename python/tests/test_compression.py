"""Compressed saves from Python: the manager's compression and a save's own,
every NumPy dtype back bit for bit, fewer bytes stored for trained-like
weights, and clear errors for a bad mode or level."""

import json
import subprocess

import numpy as np
import pytest

import ckpt

DTYPES = [np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.uint32,
          np.int32, np.uint64, np.int64, np.float16, np.float32, np.float64]


def weights(dtype, n=200_003, seed=0):
    """Values like a trained layer's: normal, small spread (random bits
    would not compress, and zeros would whatever the codec)."""
    rng = np.random.default_rng(seed)
    values = rng.normal(0.0, 0.02, n)
    if np.dtype(dtype).kind == "f":
        return values.astype(dtype)
    if dtype is np.bool_:
        return values > 0
    return (values * 1000).astype(np.int64).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_round_trips_compressed(tmp_path, dtype):
    url = str(tmp_path / "root")
    state = {"w": weights(dtype), "odd": weights(dtype, 7)}
    with ckpt.CheckpointManager(url, compression="zstd",
                                chunk_size=64 << 10) as mgr:
        mgr.save(1, state)
    with ckpt.CheckpointManager(url) as mgr:  # loads read every codec
        got = mgr.load()
        for name, array in state.items():
            assert got[name].dtype == array.dtype
            assert got[name].tobytes() == array.tobytes()


def test_compressed_weights_take_fewer_bytes(tmp_path):
    state = {"w": weights(np.float32, 1 << 20)}
    with ckpt.CheckpointManager(str(tmp_path / "raw")) as mgr:
        raw = mgr.save(1, state).info.bytes
    with ckpt.CheckpointManager(str(tmp_path / "z"), compression="zstd",
                                compression_level=3) as mgr:
        packed = mgr.save(1, state).info.bytes
        # A save's own setting wins over the manager's.
        again = mgr.save(2, state, compression="off").info.bytes
        handle = mgr.save_async(3, state, compression=("zstd", 1))
        asynchronous = handle.wait().info.bytes
    assert packed < raw * 0.9
    assert again >= raw - 4096
    assert asynchronous < raw * 0.9


def test_bad_compression_is_a_clear_error(tmp_path):
    url = str(tmp_path / "root")
    with pytest.raises(ckpt.InvalidArgument, match="compression"):
        ckpt.CheckpointManager(url, compression="gzip")
    with pytest.raises(ckpt.InvalidArgument, match="compression level 99"):
        ckpt.CheckpointManager(url, compression="zstd", compression_level=99)
    with ckpt.CheckpointManager(url, create=True) as mgr:
        with pytest.raises(ckpt.InvalidArgument, match="compression"):
            mgr.save(1, {"w": weights(np.float32)}, compression="lz4")
        with pytest.raises(ckpt.InvalidArgument, match="compression level"):
            mgr.save(1, {"w": weights(np.float32)}, compression=("zstd", 40))
        assert mgr.list() == []


def test_cli_import_compresses_and_verify_reads_it(tmp_path, ckpt_cli):
    cli = ckpt_cli
    from safetensors.numpy import save_file
    tensors = {"w": weights(np.float32, 1 << 18), "b": weights(np.float16)}
    path = str(tmp_path / "model.safetensors")
    save_file(tensors, path)
    sizes = {}
    for mode in ("off", "zstd"):
        root = str(tmp_path / mode)
        run = subprocess.run([cli, "import", path, root, "--step", "0",
                              "--compression", mode, "--json"],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        sizes[mode] = json.loads(run.stdout)["bytes"]
        check = subprocess.run([cli, "verify", root], capture_output=True,
                               text=True, timeout=120)
        assert check.returncode == 0, check.stdout + check.stderr
        with ckpt.CheckpointManager(root) as mgr:
            got = mgr.load()
        for name, array in tensors.items():
            assert got[name].tobytes() == array.tobytes()
    assert sizes["zstd"] < sizes["off"] * 0.9
    bad = subprocess.run([cli, "import", path, str(tmp_path / "bad"),
                          "--step", "0", "--compression", "gzip"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "compression" in bad.stderr


def test_torch_state_dicts_save_compressed(tmp_path):
    torch = pytest.importorskip("torch")
    import ckpt.torch as ct
    model = torch.nn.Linear(512, 512)
    with torch.no_grad():
        model.weight.normal_(0, 0.02)
    root = str(tmp_path / "root")
    packed = ct.save(model.state_dict(), root, 1, compression="zstd")
    raw = ct.save(model.state_dict(), root, 2, compression="off")
    assert packed.info.bytes < raw.info.bytes * 0.95
    again = torch.nn.Linear(512, 512)
    ct.load(again.state_dict(), root, 1)
    assert torch.equal(again.weight, model.weight)
    assert torch.equal(again.bias, model.bias)
    ct.close(root)
