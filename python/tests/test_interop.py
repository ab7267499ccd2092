"""A checkpoint saved from Python loads in C++, and the reverse.

The known state is defined here and in interop_helper.cc: tensors of every
dtype with bytes that exercise every bit, an empty and a 0-d tensor, a blob
and metadata entries.
"""

import os
import subprocess

import numpy as np
import pytest
import torch

import ckpt


@pytest.fixture(autouse=True)
def helper():
    if "CKPT_INTEROP_HELPER" not in os.environ:
        pytest.fail("CKPT_INTEROP_HELPER is not set: run the tests with ctest")


KINDS = ["bool", "uint8", "int8", "uint16", "int16", "uint32", "int32",
         "uint64", "int64", "float16", "bfloat16", "float32", "float64"]


def known_bytes(i, kind, width):
    n = 6 * width
    if kind == "bool":
        return bytes(k % 2 for k in range(n))
    return bytes((k * 37 + i * 11 + 5) & 0xFF for k in range(n))


def known_tensors():
    out = {}
    for i, kind in enumerate(KINDS):
        if kind == "bfloat16":
            raw = np.frombuffer(known_bytes(i, kind, 2), np.int16).copy()
            out[kind] = torch.from_numpy(raw).view(torch.bfloat16).reshape(2, 3)
        else:
            dtype = np.dtype(kind)
            out[kind] = np.frombuffer(known_bytes(i, kind, dtype.itemsize),
                                      dtype).reshape(2, 3).copy()
    return out


def known_state():
    return {"tensors": known_tensors(),
            "empty": np.zeros((0, 4), np.float32),
            "scalar": np.array(42, np.int64),
            "blob": bytes(range(256)),
            "meta": {"count": 7, "name": "héllo", "ratio": 0.25},
            "config": ckpt.Metadata(lr="0.1")}


def raw(value):
    if isinstance(value, torch.Tensor):
        return value.dtype, tuple(value.shape), value.view(torch.int16).numpy(
        ).tobytes()
    return value.dtype, value.shape, value.tobytes()


def run_helper(*args):
    # Under the sanitizer build, ctest preloads the ASan runtime for python3;
    # the helper carries its own and must not get a second one.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    done = subprocess.run([os.environ["CKPT_INTEROP_HELPER"], *args],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_python_save_loads_in_cpp(root):
    ckpt.open(root).save(5, known_state(), epoch=3)
    assert run_helper("check", root, "5") == "ok\n"


def test_cpp_save_loads_in_python(root):
    run_helper("save", root, "8")
    mgr = ckpt.open(root)
    [info] = mgr.list()
    assert (info.step, info.epoch) == (8, 3)
    got = mgr.load()
    expected = known_state()
    assert sorted(got) == sorted(expected)
    assert sorted(got["tensors"]) == sorted(KINDS)
    for kind, value in expected["tensors"].items():
        assert raw(got["tensors"][kind]) == raw(value), kind
    assert raw(got["empty"]) == raw(expected["empty"])
    assert raw(got["scalar"]) == raw(expected["scalar"])
    assert got["blob"] == expected["blob"]
    assert got["meta"] == expected["meta"]
    assert type(got["meta"]["count"]) is int
    assert isinstance(got["config"], ckpt.Metadata)
    assert got["config"] == {"lr": "0.1"}


def test_round_trip_through_both(root):
    run_helper("save", root, "1")
    mgr = ckpt.open(root)
    mgr.save(2, mgr.load(), epoch=3)  # C++ -> Python -> checkpoint -> C++
    assert run_helper("check", root, "2") == "ok\n"
