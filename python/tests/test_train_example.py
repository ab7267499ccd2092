"""examples/python/train.py resumes after SIGKILL and ends bit-identical to a
run that was never interrupted."""

import os
import re
import signal
import subprocess
import sys

import pytest

EXAMPLE = os.environ.get("CKPT_TRAIN_EXAMPLE")


def train(root, *extra):
    if not EXAMPLE:
        pytest.fail("CKPT_TRAIN_EXAMPLE is not set: run the tests with ctest")
    return subprocess.run(
        [sys.executable, EXAMPLE, "--root", str(root), "--epochs", "5",
         *extra], capture_output=True, text=True, timeout=120)


def digest(out):
    return re.search(r"final state sha256: ([0-9a-f]{64})", out).group(1)


def test_killed_run_resumes_and_matches_an_uninterrupted_one(tmp_path):
    killed = train(tmp_path / "run", "--kill-in-epoch", "2")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert "epoch 1: loss" in killed.stdout
    assert "epoch 2: killed halfway" in killed.stdout
    assert "final state" not in killed.stdout

    resumed = train(tmp_path / "run")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("resumed from step 2: next epoch is 2\n")
    assert "epoch 1: loss" not in resumed.stdout
    assert "epoch 4: loss" in resumed.stdout

    reference = train(tmp_path / "reference")
    assert reference.returncode == 0, reference.stderr
    assert "resumed" not in reference.stdout
    assert digest(resumed.stdout) == digest(reference.stdout)
    # The resumed epochs print the same losses as the uninterrupted ones.
    tail = resumed.stdout.splitlines()[1:]
    assert tail == reference.stdout.splitlines()[2:]
