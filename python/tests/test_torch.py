"""PyTorch CPU tensors, bfloat16 included."""

import numpy as np
import pytest
import torch

import ckpt

TORCH_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
                torch.int64, torch.float16, torch.bfloat16, torch.float32,
                torch.float64, torch.uint16, torch.uint32, torch.uint64,
                torch.float8_e4m3fn, torch.float8_e5m2]


def random_tensor(dtype, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    width = torch.empty((), dtype=dtype).element_size()
    n = int(np.prod(shape))
    raw = torch.randint(0, 256, (n * width,), dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        return (raw % 2).bool().reshape(shape)
    return raw.view(dtype).reshape(shape)


def same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    # As bytes: torch compares neither float8 nor every unsigned dtype.
    return torch.equal(a.reshape(-1).view(torch.uint8),
                       b.reshape(-1).view(torch.uint8))


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_tensors_round_trip(mgr, dtype):
    state = {"t": random_tensor(dtype, (4, 3)),
             "empty": random_tensor(dtype, (0, 3)),
             "scalar": random_tensor(dtype, ())}
    mgr.save(1, state)
    got = mgr.load(as_torch=True)
    for name, t in state.items():
        assert isinstance(got[name], torch.Tensor), name
        assert same_bits(t, got[name]), name


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_load_into_fills_tensors_of_every_dtype_in_place(mgr, dtype):
    saved = random_tensor(dtype, (5, 2), seed=3)
    mgr.save(1, {"t": saved})
    target = torch.zeros_like(saved)
    address = target.data_ptr()
    mgr.load_into({"t": target})
    assert target.data_ptr() == address and same_bits(saved, target)


def test_bfloat16_is_stored_as_bf16(mgr):
    t = torch.tensor([1.0, -2.5, 3.140625], dtype=torch.bfloat16)
    mgr.save(1, {"w": t})
    [entry] = [e for e in mgr.describe().entries if e.name == "w"]
    assert (entry.dtype, entry.shape) == ("BF16", [3])
    got = mgr.load()["w"]  # a bfloat16 tensor even without as_torch
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, t)


def test_numpy_by_default(mgr):
    mgr.save(1, {"t": torch.arange(6, dtype=torch.float32)})
    got = mgr.load()["t"]
    assert isinstance(got, np.ndarray) and got.dtype == np.float32


def test_as_torch_shares_the_loaded_memory(mgr):
    mgr.save(1, {"t": torch.arange(6, dtype=torch.float32)})
    t = mgr.load(as_torch=True)["t"]
    view = t.numpy()  # from_numpy, not a copy: the array is the tensor's memory
    view[0] = 42
    assert t[0].item() == 42


def test_load_device_cpu_is_torch_and_a_device_not_there_is_refused(mgr):
    mgr.save(1, {"w": np.arange(4, dtype=np.float32), "n": 3})
    got = mgr.load(device="cpu")
    assert isinstance(got["w"], torch.Tensor) and got["w"].device.type == "cpu"
    assert got["w"].tolist() == [0, 1, 2, 3] and got["n"] == 3
    # A device this process does not have: refused before any read, as a
    # ckpt error naming it (not torch's own assertion).
    with pytest.raises(ckpt.Unavailable, match=r"device='cuda:99'.*CUDA "
                                               r"device\(s\)"):
        mgr.load(device="cuda:99")
    for bad in ("gpu", "meta", 7.5):
        with pytest.raises(ckpt.InvalidArgument, match="load\\(device="):
            mgr.load(device=bad)


def test_a_target_whose_elements_share_memory_is_refused_naming_it(mgr):
    import ckpt.torch as ct
    mgr.save(1, {"w": torch.arange(12.0).reshape(4, 3)})
    row = torch.zeros(1, 3)
    for transactional in (True, False):
        with pytest.raises(ckpt.InvalidArgument,
                           match=r"entry 'w': the target's elements share "
                                 r"memory .*expand"):
            ct.load({"w": row.expand(4, 3)}, mgr, 1,
                    transactional=transactional)
        assert torch.equal(row, torch.zeros(1, 3))
    base = np.zeros(3, np.float32)
    array = np.lib.stride_tricks.as_strided(base, shape=(4, 3),
                                            strides=(0, 4), writeable=True)
    for transactional in (True, False):
        with pytest.raises(ckpt.InvalidArgument, match="entry 'w'.*share"):
            mgr.load_into({"w": array}, 1, transactional=transactional)
    assert (base == 0).all()


def test_unsigned_wider_than_a_byte_is_a_torch_tensor_with_as_torch(mgr):
    # torch has uint16..uint64 from 2.3 (the supported ones: 2.4 to 2.13).
    mgr.save(1, {"u": np.array([1, 2**32 - 1], dtype=np.uint32)})
    got = mgr.load(as_torch=True)["u"]
    assert got.dtype == torch.uint32
    assert got.numpy().tolist() == [1, 2**32 - 1]


def test_tensors_with_grad_and_non_contiguous_views(mgr):
    w = torch.randn(4, 5, requires_grad=True)
    mgr.save(1, {"w": w, "wt": w.t(), "bf_t": w.detach().bfloat16().t()})
    got = mgr.load(as_torch=True)
    assert torch.equal(got["w"], w.detach())
    assert torch.equal(got["wt"], w.detach().t())
    assert torch.equal(got["bf_t"], w.detach().bfloat16().t())
    assert not got["w"].requires_grad


def test_negated_views_save_and_load_their_values(mgr):
    # A view with PyTorch's negative bit (x.conj().imag makes one): its
    # memory holds the negated values, though it is contiguous.
    neg = torch._neg_view(torch.tensor([2.0, -4.0, 0.5]))
    assert neg.is_neg() and neg.is_contiguous()
    mgr.save(1, {"v": neg})
    assert torch.equal(mgr.load(as_torch=True)["v"],
                       torch.tensor([-2.0, 4.0, -0.5]))
    mgr.save(2, {"v": torch.tensor([7.0, -8.0, 9.0])})
    for transactional in (True, False):
        target = torch._neg_view(torch.zeros(3))
        assert target.is_neg() and target.is_contiguous()
        mgr.load_into({"v": target}, step=2, transactional=transactional)
        assert torch.equal(target, torch.tensor([7.0, -8.0, 9.0]))


def test_model_and_optimizer_state_dicts(mgr):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 1)).to(torch.bfloat16)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(2, 4, dtype=torch.bfloat16)).sum().backward()
    opt.step()
    mgr.save(1, {"model": model.state_dict(), "opt": opt.state_dict()})

    got = mgr.load(as_torch=True)
    model2 = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                                 torch.nn.Linear(8, 1)).to(torch.bfloat16)
    opt2 = torch.optim.Adam(model2.parameters(), lr=0.5)
    model2.load_state_dict(got["model"])
    opt2.load_state_dict(got["opt"])
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a, b) and b.dtype == torch.bfloat16
    assert opt2.param_groups[0]["lr"] == 0.01
    assert opt2.param_groups[0]["betas"] == (0.9, 0.999)
    for s1, s2 in zip(opt.state.values(), opt2.state.values()):
        for k in s1:
            assert torch.equal(s1[k], s2[k]), k


def test_unsupported_tensors_raise_invalid_argument(mgr):
    with pytest.raises(ckpt.InvalidArgument, match="complex"):
        mgr.save(1, {"c": torch.zeros(2, dtype=torch.complex64)})
    with pytest.raises(ckpt.InvalidArgument, match="strided"):
        mgr.save(1, {"s": torch.eye(2).to_sparse()})
    with pytest.raises(ckpt.InvalidArgument, match="meta"):
        mgr.save(1, {"m": torch.empty(2, device="meta")})


def test_many_small_tensors_between_other_entries_keep_order_and_bits(mgr):
    # Runs of whole tensors go to the library in one call each; the entries
    # between them (bytes, scalars, an array) in calls of their own.
    base = random_tensor(torch.float32, (300, 8), seed=3)
    state = {f"opt.{i}": random_tensor(TORCH_DTYPES[i % 10], (i % 4, 3),
                                       seed=i) for i in range(200)}
    state["blob"] = b"\0\1"
    state["row"] = base[7]  # a view at an offset into its storage
    state["step"] = 12
    state["empty"] = torch.zeros(0, 5)
    state["scalar"] = torch.tensor(2.5, dtype=torch.float64)
    state["np"] = np.arange(6, dtype=np.int16).reshape(2, 3)
    mgr.save(1, state)
    got = mgr.load(as_torch=True)
    assert list(got) == list(state)
    for k, v in state.items():
        if isinstance(v, torch.Tensor):
            assert same_bits(v, got[k]), k
    assert got["blob"] == b"\0\1" and got["step"] == 12
    assert np.array_equal(got["np"].numpy(), state["np"])
    assert [e.name for e in mgr.describe().entries if
            e.name != "__python_tree__"] == list(state)


def test_the_first_bad_entry_of_a_run_of_tensors_is_the_one_named(mgr):
    # The names of a run are checked together, after its tensors: an error
    # is still the first bad entry's, as when each was checked in turn.
    def save(*entries):
        mgr._m.save(1, [(n, "tensor", v, None, None) for n, v in entries],
                    -1, {}, {}, False, {})

    good, bad = np.zeros(2, np.float32), "not a tensor"
    with pytest.raises(ckpt.InvalidArgument, match='"b": a tensor must be'):
        save(("a", good), ("b", bad), ("c\0", good))
    with pytest.raises(ckpt.InvalidArgument, match="NUL"):
        save(("a", good), ("b\0", good), ("c", bad))
    with pytest.raises(ckpt.InvalidArgument, match="NUL"):
        save(("a", good), ("b\0", good))
    with pytest.raises(TypeError, match="entry name must be a str"):
        save(("a", good), (7, good))
    with pytest.raises(ckpt.InvalidArgument, match=r"a/\.\./b"):
        save(("a", good), ("a/../b", good))
    assert mgr.latest() is None


def test_a_swap_exchanges_bytes_a_slice_at_a_time(monkeypatch):
    # ckpt.torch.load hands loaded bytes over by exchanging them with the
    # tensors' own (a second exchange puts them back) through one small
    # buffer, not a clone of each tensor: every shape and layout, slices
    # smaller than a row included, keeps every bit.
    from ckpt import _values
    monkeypatch.setattr(_values, "_EXCHANGE_BYTES", 64)
    cases = [
        torch.arange(1000, dtype=torch.float32),
        torch.arange(60, dtype=torch.int64).reshape(6, 10).t(),  # strided
        torch.arange(200).to(torch.bfloat16).reshape(2, 100),
        torch.arange(77) % 3 == 0,
        torch.tensor(3.5, dtype=torch.float64),
        torch.empty(0, 5),
        torch.arange(400, dtype=torch.float32).reshape(20, 20).t(),  # rows 80
    ]
    scratch = {}
    for t in cases:
        old = t.clone()
        new = (~t if t.dtype == torch.bool else -t - 1).contiguous()
        loaded = new.clone()
        _values._exchange_tensors(torch, t, new, scratch)
        assert torch.equal(t, loaded) and torch.equal(new, old), t.shape
        _values._exchange_tensors(torch, t, new, scratch)
        assert torch.equal(t, old) and torch.equal(new, loaded), t.shape
    # One buffer for all: at most _EXCHANGE_BYTES (contiguous tensors go as
    # flat ones), or one row of a strided tensor where a row is more (the
    # last one's rows of 80 bytes).
    assert scratch[torch.device("cpu")].numel() == 80


def test_zero_size_tensors_load_with_ordinary_strides(mgr):
    # NumPy gives a zero-size array strides 0, which torch.from_numpy kept:
    # .view(dtype) of the loaded tensor then failed where the saved one's
    # worked.
    saved = {"f": torch.zeros(0, 5), "b": torch.zeros(3, 0, dtype=torch.bfloat16)}
    mgr.save(1, saved)
    got = mgr.load(as_torch=True)
    for name, t in saved.items():
        assert got[name].shape == t.shape and got[name].dtype == t.dtype
        assert got[name].stride() == t.stride()
        assert got[name].view(torch.uint8).shape == t.view(torch.uint8).shape
