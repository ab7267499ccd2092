"""CUDA memory from Python, on the double of the CUDA driver.

Debian's PyTorch has no CUDA, so these tests hand the package objects with
the __cuda_array_interface__ (what CuPy, Numba and PyTorch's CUDA tensors
offer) over "device memory" that the double of the driver
(libckpt_fake_cuda.so, src/testing/fake_cuda.h) allocates; the library loads
the same double as its driver (CKPT_CUDA_DRIVER). The double's device memory
is host memory, so a test reads it directly once the copies are done.
"""

import ctypes
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import ckpt

FAKE = os.environ.get("CKPT_FAKE_CUDA", "")
if not os.path.isfile(FAKE):
    why = (f"CKPT_FAKE_CUDA ({FAKE!r}) names no double of the CUDA driver "
           f"(the build's src/testing/libckpt_fake_cuda.so): no device tests")
    warnings.warn(pytest.PytestWarning(f"test_cuda.py skipped: {why}"))
    pytest.skip(why, allow_module_level=True)
# Before the library's first device call, which loads the driver once.
os.environ["CKPT_CUDA_DRIVER"] = FAKE

cuda = ctypes.CDLL(FAKE)
for fn in ("cuInit", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent",
           "cuMemAlloc_v2", "cuMemFree_v2", "cuStreamCreate",
           "cuStreamDestroy_v2", "ckpt_fake_cuda_inject"):
    getattr(cuda, fn).restype = ctypes.c_int
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                               ctypes.c_size_t]
cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
cuda.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
cuda.cuStreamCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
cuda.cuStreamDestroy_v2.argtypes = [ctypes.c_void_p]
cuda.ckpt_fake_cuda_inject.argtypes = [ctypes.c_char_p, ctypes.c_int64]


def check(result, what):
    assert result == 0, f"{what}: CUDA error {result}"


def current_context():
    """Makes device 0's primary context current on this thread, as a
    framework does before it allocates."""
    check(cuda.cuInit(0), "cuInit")
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "retain")
    check(cuda.cuCtxSetCurrent(ctx), "set current")


@pytest.fixture(autouse=True)
def device_context():
    current_context()
    yield
    # A fault a test injected must not reach the next test; resetting the
    # double also undoes cuInit, which the library's driver did once.
    cuda.ckpt_fake_cuda_reset()
    current_context()


class DeviceArray:
    """Device memory of the double with the __cuda_array_interface__."""

    TYPESTRS = {np.dtype(np.float32): "<f4", np.dtype(np.int64): "<i8",
                np.dtype(np.uint8): "|u1", np.dtype(np.float16): "<f2"}

    def __init__(self, host, stream=None, readonly=False):
        self.shape, self.dtype = host.shape, host.dtype
        self.nbytes = host.nbytes
        self.ptr = ctypes.c_uint64()
        check(cuda.cuMemAlloc_v2(ctypes.byref(self.ptr), max(self.nbytes, 1)),
              "cuMemAlloc_v2")
        self.write(host)
        self.stream, self.readonly = stream, readonly
        self.device = 0

    @property
    def __cuda_array_interface__(self):
        face = {"shape": self.shape, "typestr": self.TYPESTRS[self.dtype],
                "data": (self.ptr.value, self.readonly), "version": 3,
                "strides": None}
        if self.stream is not None:
            face["stream"] = self.stream
        return face

    def write(self, host):
        host = np.ascontiguousarray(host, dtype=self.dtype)
        ctypes.memmove(self.ptr.value, host.ctypes.data, host.nbytes)

    def read(self):
        out = np.empty(self.shape, self.dtype)
        ctypes.memmove(out.ctypes.data, self.ptr.value, self.nbytes)
        return out

    def __del__(self):
        cuda.cuMemFree_v2(self.ptr.value)


def weights(seed, shape=(300, 257), dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_a_device_array_saves_and_loads_back_bit_identically(root):
    mgr = ckpt.open(root)
    w, step = weights(0), np.arange(7, dtype=np.int64)
    dev_w, dev_step = DeviceArray(w), DeviceArray(step)
    host = weights(1, (5, 3))
    mgr.save(1, {"w": dev_w, "host": host, "step": dev_step, "note": "x"})
    got = mgr.load()  # into host memory
    assert got["w"].tobytes() == w.tobytes() and got["w"].shape == w.shape
    assert np.array_equal(got["step"], step)
    assert np.array_equal(got["host"], host) and got["note"] == "x"
    # And back into device memory, in place.
    target = {"w": DeviceArray(np.zeros_like(w)),
              "step": DeviceArray(np.zeros_like(step)),
              "host": np.zeros_like(host)}
    mgr.load_into(target)
    assert target["w"].read().tobytes() == w.tobytes()
    assert np.array_equal(target["step"].read(), step)
    assert np.array_equal(target["host"], host)


def test_save_async_copies_the_device_memory_before_returning(root):
    mgr = ckpt.open(root)
    w = weights(2)
    dev = DeviceArray(w)
    handle = mgr.save_async(3, {"w": dev})
    dev.write(np.zeros_like(w))  # the next step overwrites it at once
    assert handle.wait().info.step == 3
    assert mgr.load()["w"].tobytes() == w.tobytes()


def test_staging_in_the_background_until_wait_staged(root):
    mgr = ckpt.open(root)
    w, h = weights(7), weights(8, (4, 4))
    dev = DeviceArray(w)
    host = h.copy()
    handle = mgr.save_async(2, {"w": dev, "h": host},
                            stage_in_background=True)
    handle.wait_staged()  # before the optimizer step changes the arrays
    dev.write(np.zeros_like(w))
    host[:] = 0
    assert handle.wait().info.step == 2
    got = mgr.load()
    assert got["w"].tobytes() == w.tobytes()
    assert got["h"].tobytes() == h.tobytes()
    # A copy that fails: wait_staged raises it, nothing is committed.
    check(cuda.ckpt_fake_cuda_inject(b"copy_fails_on_call", 0), "inject")
    failed = mgr.save_async(3, {"w": dev}, stage_in_background=True)
    with pytest.raises(ckpt.Error, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        failed.wait_staged()
    with pytest.raises(ckpt.Error, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        failed.wait()
    assert mgr.latest() == 2


def test_the_copies_wait_for_the_arrays_stream_and_reshard(root):
    stream = ctypes.c_void_p()
    check(cuda.cuStreamCreate(ctypes.byref(stream), 0), "cuStreamCreate")
    try:
        w = weights(3, (64, 33))
        # Saved as two pieces, loaded as one tensor and as other pieces.
        mgr = ckpt.open(root)
        mgr.save(1, {"w": DeviceArray(w, stream=stream.value)})
        half = DeviceArray(np.zeros((32, 33), np.float32),
                           stream=stream.value)
        mgr.load_into({"w": ckpt.Shard(half, [32, 0], [64, 33])})
        assert half.read().tobytes() == w[32:].tobytes()
    finally:
        cuda.cuStreamDestroy_v2(stream)


def test_incremental_save_of_device_memory(root):
    mgr = ckpt.open(root, chunk_size=1 << 20)
    w = weights(4, (1024, 1024))  # 4 MiB: a chunk per 256 rows
    dev = DeviceArray(w)
    mgr.save(1, {"w": dev})
    w[0, 0] += 1
    dev.write(w)
    result = mgr.save(2, {"w": dev}, incremental=True)
    assert result.info.parent == 1
    # The changed chunk is written; the other three are referenced.
    assert (1 << 20) <= result.info.bytes < (2 << 20)
    assert mgr.load()["w"].tobytes() == w.tobytes()


def test_a_read_only_device_array_is_not_a_load_target(root):
    mgr = ckpt.open(root)
    mgr.save(1, {"w": np.ones(4, np.float32)})
    with pytest.raises(ckpt.InvalidArgument, match="read-only"):
        mgr.load_into({"w": DeviceArray(np.zeros(4, np.float32),
                                        readonly=True)})


def test_a_copy_failing_mid_save_commits_nothing(root):
    mgr = ckpt.open(root)
    w = weights(5)
    mgr.save(1, {"w": DeviceArray(w)})
    check(cuda.ckpt_fake_cuda_inject(b"copy_fails_after_bytes", 1000),
          "inject")
    with pytest.raises(ckpt.Error, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        mgr.save(2, {"w": DeviceArray(weights(6))})
    assert [i.step for i in mgr.list()] == [1]
    assert mgr.load()["w"].tobytes() == w.tobytes()


def test_without_a_driver_a_device_array_is_a_clear_error(tmp_path):
    # A process of its own: the library loads the driver once per process.
    script = f"""
import ctypes, sys
import ckpt
class Dev:
    __cuda_array_interface__ = {{"shape": (4,), "typestr": "<f4",
                                "data": (4096, False), "version": 3}}
mgr = ckpt.open({str(tmp_path / 'root')!r})
try:
    mgr.save(1, {{"w": Dev()}})
except ckpt.Unavailable as e:
    print("Unavailable:", e)
print("committed:", [i.step for i in mgr.list()])
"""
    env = dict(os.environ, CKPT_CUDA_DRIVER=str(tmp_path / "no-libcuda.so"))
    out = subprocess.run([sys.executable, "-c", script], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Unavailable:" in out.stdout and "no-libcuda.so" in out.stdout, \
        out.stdout
    assert 'tensor "w" on cuda:0' in out.stdout, out.stdout
    assert "committed: []" in out.stdout


class DeviceModel:
    """A model whose parameters live in device memory, as a CUDA model's
    state_dict() hands them out (Stateful: state_dict, load_state_dict)."""

    def __init__(self, seed):
        self.params = {"fc.weight": DeviceArray(weights(seed, (64, 32))),
                       "fc.bias": DeviceArray(weights(seed + 1, (64,))),
                       "steps": DeviceArray(np.array([seed], np.int64))}
        self.loaded = None

    def state_dict(self):
        return dict(self.params)

    def load_state_dict(self, state):
        self.loaded = state


def test_a_device_models_state_dict_through_ckpt_torch_in_place(root):
    import ckpt.torch as ct
    saved = DeviceModel(10)
    want = {k: v.read() for k, v in saved.params.items()}
    ct.save({"model": saved, "step": 3}, root, 3)
    handle = ct.async_save({"model": saved, "step": 4}, root, 4)
    saved.params["fc.weight"].write(np.zeros((64, 32), np.float32))
    assert handle.wait().info.step == 4
    for step in (3, 4):
        fresh = DeviceModel(20)
        before = {k: v.ptr.value for k, v in fresh.params.items()}
        state = {"model": fresh, "step": 0}
        ct.load(state, root, step)
        assert state["step"] == step
        # Filled where they are, then handed to load_state_dict.
        assert {k: v.ptr.value for k, v in fresh.params.items()} == before
        assert fresh.loaded is not None
        for name, value in fresh.params.items():
            assert value.read().tobytes() == want[name].tobytes(), name
    ct.close()
