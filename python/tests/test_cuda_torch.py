"""Real CUDA: PyTorch tensors in GPU memory saved and loaded through the real
driver (libcuda.so.1), bit for bit, from one process and under torchrun.

test_cuda.py drives the double of the driver, whose "device memory" is host
memory; these tests are the same promises on a GPU. Where PyTorch has no
CUDA or sees no device (Debian's PyTorch here), the module is skipped and
says so in the log.
"""

import os
import warnings

import numpy as np
import pytest

import ckpt

try:
    import torch
except ImportError as e:  # pragma: no cover - Debian's python3-torch is here
    torch = None
    _why = f"PyTorch is not importable ({e})"
else:
    _why = ("this PyTorch has no CUDA" if not torch.backends.cuda.is_built()
            else "PyTorch sees no CUDA device"
            if not torch.cuda.is_available() else "")
if _why:
    warnings.warn(pytest.PytestWarning(
        f"test_cuda_torch.py skipped: {_why}: no real-GPU tests"))
    pytest.skip(_why, allow_module_level=True)

import ckpt.torch as ct  # noqa: E402 - after the skip

import torchrun_util  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "torchrun_job.py")
DEV = torch.device("cuda", 0)


def host_bytes(t):
    # reshape(-1): a 0-d tensor cannot be viewed as bytes.
    return t.detach().cpu().contiguous().reshape(-1).view(
        torch.uint8).numpy().tobytes()


def same_bits(a, b):
    return (a.dtype == b.dtype and a.shape == b.shape
            and host_bytes(a) == host_bytes(b))


@pytest.fixture(autouse=True)
def let_go_of_managers():
    yield
    ct.close()


def every_dtype(seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    f = torch.randn(257, 33, device=DEV, generator=g)
    return {
        "f32": f,
        "bf16": f.to(torch.bfloat16),
        "f16": (f * 3).to(torch.float16),
        "f64": f[:7].double(),
        "i64": torch.randint(-2**40, 2**40, (1000,), device=DEV, generator=g),
        "i8": torch.randint(-128, 127, (3, 5, 7), device=DEV, generator=g,
                            dtype=torch.int8),
        "u8": torch.randint(0, 255, (4097,), device=DEV, generator=g,
                            dtype=torch.uint8),
        "bool": torch.rand(999, device=DEV, generator=g) > 0.5,
        "scalar": torch.tensor(3.25, device=DEV),
        "empty": torch.empty(0, 4, device=DEV),
    }


def zeros_like(state):
    return {k: torch.zeros_like(v) for k, v in state.items()}


def test_every_dtype_round_trips_through_gpu_memory(tmp_path):
    root = str(tmp_path / "r")
    saved = every_dtype(1)
    ct.save(saved, root, 1)
    got = zeros_like(saved)
    assert ct.load(got, root).step == 1
    for k in saved:
        assert got[k].device == DEV, k
        assert same_bits(got[k], saved[k]), k


def test_model_and_adam_on_the_gpu_resume_bit_for_bit(tmp_path):
    root = str(tmp_path / "r")

    def make(seed):
        torch.manual_seed(seed)
        m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                torch.nn.Linear(128, 10)).to(DEV)
        return m, torch.optim.AdamW(m.parameters(), lr=1e-3)

    def train(m, opt, steps, seed):
        g = torch.Generator(device=DEV).manual_seed(seed)
        for _ in range(steps):
            loss = m(torch.randn(32, 64, device=DEV, generator=g)).square(
            ).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    m, opt = make(0)
    train(m, opt, 5, 1)
    ct.save({"model": m, "optim": opt}, root, 5)
    train(m, opt, 5, 2)  # the uninterrupted run goes on

    m2, opt2 = make(99)
    ct.load({"model": m2, "optim": opt2}, root)
    train(m2, opt2, 5, 2)
    for (name, a), b in zip(m.state_dict().items(), m2.state_dict().values()):
        assert same_bits(a, b), name
    for i, s in opt.state_dict()["state"].items():
        for k in ("exp_avg", "exp_avg_sq"):
            assert same_bits(s[k], opt2.state_dict()["state"][i][k]), (i, k)


def test_a_tensor_larger_than_the_staging_block(tmp_path):
    root = str(tmp_path / "r")
    # 200 MiB passes through the 64 MiB page-locked staging block in parts.
    big = torch.arange(50 * 2**20, device=DEV, dtype=torch.float32)
    ct.save({"big": big}, root, 1)
    got = {"big": torch.full_like(big, -1)}
    ct.load(got, root)
    assert torch.equal(got["big"], big)


def test_work_queued_on_the_current_stream_is_saved(tmp_path):
    """A save orders its copy after the kernels already queued on the
    tensor's current stream, as PyTorch's own copies do."""
    root = str(tmp_path / "r")
    side = torch.cuda.Stream()
    x = torch.zeros(8 * 2**20, device=DEV)
    with torch.cuda.stream(side):
        # Long enough that an unordered copy would see zeros.
        for _ in range(20):
            x.add_(1)
        ct.save({"x": x}, root, 1)
    torch.cuda.synchronize()
    got = {"x": torch.zeros_like(x)}
    ct.load(got, root)
    assert torch.all(got["x"] == 20)


def test_async_save_captures_the_state_at_the_call(tmp_path):
    root = str(tmp_path / "r")
    state = every_dtype(2)
    want = {k: v.clone() for k, v in state.items()}
    handle = ct.async_save(state, root, 1)
    for v in state.values():
        v.zero_()  # the optimizer step right after the call
    handle.wait()
    got = zeros_like(want)
    ct.load(got, root)
    for k in want:
        assert same_bits(got[k], want[k]), k


def test_stage_in_background_captures_the_state_at_wait_staged(tmp_path):
    root = str(tmp_path / "r")
    x = torch.randn(16 * 2**20, device=DEV)
    want = x.clone()
    handle = ct.async_save({"x": x}, root, 1, stage_in_background=True)
    handle.wait_staged()
    x.mul_(0)
    handle.wait()
    got = {"x": torch.empty_like(x)}
    ct.load(got, root)
    assert same_bits(got["x"], want)


def test_gpu_and_host_checkpoints_load_either_way(tmp_path):
    gpu_root, host_root = str(tmp_path / "g"), str(tmp_path / "h")
    saved = every_dtype(3)
    ct.save(saved, gpu_root, 1)
    on_host = {k: torch.zeros_like(v, device="cpu") for k, v in saved.items()}
    ct.load(on_host, gpu_root)
    for k in saved:
        assert same_bits(on_host[k], saved[k]), k
    ct.save({k: v.clone() for k, v in on_host.items()}, host_root, 1)
    back = zeros_like(saved)
    ct.load(back, host_root)
    for k in saved:
        assert same_bits(back[k], saved[k]), k
    # The numpy reader sees the same bytes that were in GPU memory.
    arrays = ckpt.open(gpu_root, create=False).load()
    assert arrays["i64"].tobytes() == host_bytes(saved["i64"])
    assert isinstance(arrays["f32"], np.ndarray)


def test_compressed_checkpoints_load_into_gpu_memory(tmp_path):
    # Weights like a trained layer's (a random bit pattern would not
    # compress): saved compressed from host memory, loaded into CUDA
    # tensors through the pinned staging; saved compressed from GPU memory
    # (copied into the pinned staging memory first, compressed from there),
    # loaded back alike.
    g = torch.Generator().manual_seed(5)
    host = {"w32": torch.randn(1024, 1024, generator=g) * 0.02,
            "w16": (torch.randn(2048, 512, generator=g) * 0.02).bfloat16()}
    root = str(tmp_path / "c")
    packed = ct.save(host, root, 1, compression="zstd")
    raw = ct.save(host, root, 2, compression="off")
    assert packed.info.bytes < raw.info.bytes * 0.9
    on_gpu = {k: torch.zeros_like(v, device=DEV) for k, v in host.items()}
    ct.load(on_gpu, root, 1)
    for k in host:
        assert same_bits(on_gpu[k], host[k]), k
    gpu_root = str(tmp_path / "g")
    from_gpu = ct.save(on_gpu, gpu_root, 1, compression="zstd")
    assert from_gpu.info.bytes < raw.info.bytes * 0.9
    back = {k: torch.zeros_like(v, device=DEV) for k, v in host.items()}
    ct.load(back, gpu_root)
    for k in host:
        assert same_bits(back[k], host[k]), k


def test_a_non_contiguous_gpu_tensor_saves_and_is_filled(tmp_path):
    root = str(tmp_path / "r")
    t = torch.arange(48, device=DEV, dtype=torch.float32).reshape(6, 8).t()
    ct.save({"w": t}, root, 1)
    got = {"w": torch.zeros(8, 6, device=DEV)}
    ct.load(got, root)
    assert same_bits(got["w"], t.contiguous())
    # A strided view is filled too, in place: the caller's own tensor (a
    # module's parameter, say) holds the bytes, not a new one in the dict.
    view = torch.zeros(6, 8, device=DEV).t()
    state = {"w": view}
    ct.load(state, root)
    assert state["w"] is view and not view.is_contiguous()
    assert torch.equal(view, t)


def test_cupy_arrays_through_the_array_interface(tmp_path):
    cupy = pytest.importorskip("cupy")
    root = str(tmp_path / "r")
    a = cupy.arange(1000, dtype=cupy.float32) / 7
    mgr = ckpt.open(root)
    mgr.save(1, {"a": a})
    b = cupy.zeros_like(a)
    mgr.load_into({"a": b})
    assert bool((a == b).all())


def test_torchrun_ranks_save_gpu_shards_and_reshard(tmp_path):
    """Two ranks under torchrun save their rows of a tensor, a model and its
    optimizer from GPU memory; three ranks load them back into GPU memory,
    split their own way."""
    root = str(tmp_path / "r")
    for n, op in ((2, "gsave"), (3, "gload")):
        rc, out, err = torchrun_util.torchrun(n, JOB, [op, root])
        assert rc == 0, f"torchrun -n {n} {op} exited {rc}:\n{out}{err}"
