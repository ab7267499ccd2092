"""FSDP2 under torchrun (gloo, CPU): a model sharded with fully_shard and its
Adam state, through torch.distributed.checkpoint.state_dict's
get_state_dict/set_state_dict and ckpt.torch, saved on 4 ranks and resumed
on 2 and on 3 bit for bit, beside DTensors with Shard and Replicate
placements on 1-D and 2-D meshes; a damaged step fails the load on every
rank and changes nothing. fsdp2_job.py is the job."""

import os
import shutil

import pytest

import torchrun_util

torchrun_util.skip_without_torchrun("test_fsdp2.py")

try:
    from torch.distributed.fsdp import fully_shard  # noqa: F401
    from torch.distributed.tensor import DTensor  # noqa: F401
except ImportError as e:  # PyTorch before 2.6
    torchrun_util.skip_module("test_fsdp2.py",
                              f"this PyTorch has no FSDP2 ({e})")

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                   "fsdp2_job.py")


def run(n, *args):
    rc, out, err = torchrun_util.torchrun(n, JOB, args, timeout=180)
    assert rc == 0, f"torchrun -n {n} {' '.join(map(str, args))}:\n{out}{err}"
    return err


def flip_a_data_byte(root):
    """Flips the last byte of the largest data object of the root's one
    step: a tensor's bytes, past any header."""
    files = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs
             if f.endswith(".safetensors")]
    assert files, f"no data object under {root}"
    path = max(files, key=os.path.getsize)
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        b = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([b[0] ^ 0xFF]))


def test_fsdp2_and_adam_4_to_2_and_3_ranks_bit_identical(tmp_path):
    root, ref = tmp_path / "run", tmp_path / "ref.npz"
    run(4, "save", root, ref)
    for n in (2, 3):
        err = run(n, "load", root, ref)
        assert err.count(f"of {n} loaded") == n, err
    bad = tmp_path / "bad"
    shutil.copytree(root, bad)
    flip_a_data_byte(bad)
    err = run(3, "bad", bad)
    assert err.count("refused") == 3, err


def test_a_fresh_optimizer_given_as_it_is_gets_dtensor_moments(tmp_path):
    # {"model": model, "optim": opt}: a fresh Adam's moments, which the load
    # makes, are DTensors like the parameters (a plain tensor of the global
    # shape made the next step fail), at the saving world size and others.
    root, ref = tmp_path / "run", tmp_path / "ref.npz"
    run(2, "stateful-save", root, ref)
    for n in (2, 3, 1):
        err = run(n, "stateful-load", root, ref)
        assert err.count(f"of {n} loaded the Stateful pair") == n, err


def test_a_real_partial_dtensor_is_refused_on_every_rank(tmp_path):
    # PyTorch gives a Partial's rank the whole tensor as its box: saved as
    # such, one rank's part of the sum would be stored as the value.
    err = run(2, "partial", tmp_path / "partial")
    assert err.count("refused the Partial (save)") == 2, err
    assert err.count("refused the Partial (load)") == 2, err
