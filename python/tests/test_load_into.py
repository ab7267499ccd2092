"""load_into fills the caller's arrays and tensors in place."""

import numpy as np
import pytest
import torch

import ckpt


def data_pointer(a):
    return a.__array_interface__["data"][0]


def test_fills_numpy_arrays_in_place(mgr):
    mgr.save(1, {"model": {"w": np.arange(12.0).reshape(3, 4),
                           "b": np.arange(3, dtype=np.int16)},
                 "scalar": np.array(7, np.int64), "empty": np.zeros((0, 2))})
    w, b = np.zeros((3, 4)), np.zeros(3, np.int16)
    scalar, empty = np.zeros((), np.int64), np.zeros((0, 2))
    state = {"model": {"w": w, "b": b}, "scalar": scalar, "empty": empty}
    before = {id(a): data_pointer(a) for a in (w, b, scalar, empty)}
    info = mgr.load_into(state)
    assert info.step == 1
    # The very same objects, at the same addresses, now hold the checkpoint.
    assert state["model"]["w"] is w and state["model"]["b"] is b
    assert state["scalar"] is scalar and state["empty"] is empty
    assert {id(a): data_pointer(a) for a in (w, b, scalar, empty)} == before
    assert (w == np.arange(12.0).reshape(3, 4)).all()
    assert (b == np.arange(3)).all() and scalar == 7


def test_fills_views_of_a_larger_buffer(mgr):
    mgr.save(1, {"a": np.arange(4.0), "b": np.arange(4.0) + 10})
    buf = np.zeros(8)
    mgr.load_into({"a": buf[:4], "b": buf[4:]})
    assert (buf == np.r_[np.arange(4.0), np.arange(4.0) + 10]).all()


def test_fills_torch_tensors_and_model_parameters(mgr):
    torch.manual_seed(0)
    source = torch.nn.Linear(3, 2).to(torch.bfloat16)
    mgr.save(1, {"model": source.state_dict(), "epoch": 5})
    target = torch.nn.Linear(3, 2).to(torch.bfloat16)
    pointers = [p.data_ptr() for p in target.parameters()]
    state = {"model": target.state_dict(), "epoch": 0}
    mgr.load_into(state)
    assert [p.data_ptr() for p in target.parameters()] == pointers
    for a, b in zip(source.parameters(), target.parameters()):
        assert torch.equal(a, b)
    assert state["epoch"] == 5  # scalars are replaced in their dict


def test_non_contiguous_targets_go_through_a_staging_copy(mgr):
    mgr.save(1, {"t": np.arange(6.0).reshape(2, 3),
                 "tt": torch.arange(6.0).reshape(2, 3),
                 "be": np.arange(3, dtype=np.int32)})
    a = np.zeros((3, 2)).T
    t = torch.zeros(3, 2).t()
    be = np.zeros(3, ">i4")
    mgr.load_into({"t": a, "tt": t, "be": be})
    assert (a == np.arange(6.0).reshape(2, 3)).all()
    assert torch.equal(t, torch.arange(6.0).reshape(2, 3))
    assert (be == np.arange(3)).all() and be.dtype == np.dtype(">i4")


def test_replaces_non_array_values_in_dicts_lists_and_tuples(mgr):
    mgr.save(1, {"blob": b"new", "n": [1, (2, "x")], "cfg": ckpt.Metadata(a=1)})
    state = {"blob": b"", "n": [0, (0, "")], "cfg": None}
    mgr.load_into(state)
    assert state == {"blob": b"new", "n": [1, (2, "x")], "cfg": {"a": 1}}


def test_bf16_into_uint16_array(mgr):
    mgr.save(1, {"w": torch.tensor([1.0, 2.0], dtype=torch.bfloat16)})
    bits = np.zeros(2, np.uint16)
    mgr.load_into({"w": bits})
    assert (bits == np.array([0x3f80, 0x4000], np.uint16)).all()


def test_older_step_and_strict(mgr):
    mgr.save(1, {"a": np.ones(2), "b": np.ones(2)})
    mgr.save(2, {"a": np.full(2, 2.0), "b": np.ones(2)})
    a = np.zeros(2)
    assert mgr.load_into({"a": a}, step=1).step == 1
    assert (a == 1).all()
    with pytest.raises(ckpt.InvalidArgument, match="'b'"):
        mgr.load_into({"a": a}, strict=True)
    mgr.load_into({"a": a, "b": np.zeros(2)}, strict=True)
    assert (a == 2).all()


def test_mismatches_are_refused_before_writing(mgr):
    mgr.save(1, {"a": np.ones(3, np.float32), "b": np.ones(3)})
    b = np.zeros(3)
    with pytest.raises(ckpt.InvalidArgument, match="F32"):
        mgr.load_into({"b": b, "a": np.zeros(3, np.float64)})
    with pytest.raises(ckpt.InvalidArgument):
        mgr.load_into({"b": b, "a": np.zeros(4, np.float32)})
    with pytest.raises(ckpt.NotFound, match="'?c'?"):
        mgr.load_into({"b": b, "c": np.zeros(3)})
    ro = np.zeros(3, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ckpt.InvalidArgument, match="read-only"):
        mgr.load_into({"a": ro})
    assert (b == 0).all()  # nothing was written by the refused loads
