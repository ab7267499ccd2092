"""examples/python/torchrun_train.py under torchrun: a job killed with
SIGKILL and resumed at other world sizes (2, then 3, then 1 rank) ends with
the same parameters and Adam state, bit for bit, as a job that ran through
at 2 ranks."""

import os
import re

import ckpt

import torchrun_util

TEST = "test_torchrun_train.py"
torchrun_util.skip_without_torchrun(TEST)


def _example():
    given = os.environ.get("CKPT_TORCHRUN_EXAMPLE")
    if given:
        return given
    # Run from the source tree (python/tests/): the example is two levels up.
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, os.pardir, os.pardir, "examples", "python",
                        "torchrun_train.py")
    return os.path.normpath(path) if os.path.exists(path) else None


EXAMPLE = _example()
if EXAMPLE is None:
    torchrun_util.skip_module(TEST, "CKPT_TORCHRUN_EXAMPLE is not set and examples/python/"
          "torchrun_train.py is not next to this test (run the tests with "
          "ctest or from the source tree)")
if not os.path.exists(EXAMPLE):
    torchrun_util.skip_module(TEST, f"CKPT_TORCHRUN_EXAMPLE={EXAMPLE} does not exist")

STEPS, SAVE_EVERY = 12, 3
# torchrun's report of a worker that died of signal 9.
KILLED = re.compile(r"failed \(exitcode: -9\) local_rank: 0")


def train(n, root, out, *extra):
    """Runs the example on n processes; (exit code, its output)."""
    # --monitor_interval 1: torchrun notices a killed worker within a second
    # (its default is 5).
    rc, stdout, stderr = torchrun_util.torchrun(
        n, EXAMPLE, ["--root", root, "--steps", STEPS, "--save-every",
                     SAVE_EVERY, "--out", out, *extra],
        extra=["--monitor_interval", "1"])
    return rc, stdout + stderr


def rank0_lines(output):
    """What rank 0 printed, without torchrun's "[default0]:" prefixes."""
    return [line.split("]:", 1)[1] for line in output.splitlines()
            if re.match(r"\[\w*?0\]:", line)]


def resumes(output):
    return [tuple(map(int, m)) for m in re.findall(
        r"resumed from step (\d+) \(saved by (\d+) ranks?\) "
        r"on (\d+) ranks?\n", output)]


def committed(root):
    return ckpt.open(str(root), create=False).latest()


def test_killed_and_resumed_at_other_world_sizes_ends_bit_identical(
        tmp_path):
    reference = tmp_path / "reference.params"
    rc, ran_through = train(2, tmp_path / "reference", reference)
    assert rc == 0, ran_through
    assert resumes(ran_through) == [], ran_through
    assert f"step {STEPS}: loss" in ran_through, ran_through
    assert reference.stat().st_size > 0

    # Killed at 2 ranks after step 6's save was started: that save was in
    # flight, so the newest committed step is 6 or, when the kill beat its
    # commit, 3 (waited on before step 6's save began).
    root, final = tmp_path / "run", tmp_path / "run.params"
    rc, out = train(2, root, final, "--die-at", 6)
    assert rc != 0, out
    assert "step 6: rank 0 kills itself (SIGKILL)" in out, out
    assert KILLED.search(out), out  # a real SIGKILL, as torchrun saw it
    assert resumes(out) == [], out
    first = committed(root)
    assert first in (3, 6), out
    assert not final.exists()

    # Resumed at 3 ranks (which split the batch of 10 unevenly: 4, 3 and
    # 3 samples), killed again.
    rc, out = train(3, root, final, "--die-at", 9)
    assert rc != 0, out
    assert resumes(out) == [(first, 2, 3)], out
    assert "step 9: rank 0 kills itself (SIGKILL)" in out, out
    assert KILLED.search(out), out
    second = committed(root)
    assert second in (6, 9), out
    assert not final.exists()

    # Resumed at 1 rank, to the end.
    rc, out = train(1, root, final)
    assert rc == 0, out
    assert resumes(out) == [(second, 3, 1)], out
    assert rank0_lines(out)[0].startswith(f"resumed from step {second} "), out
    assert committed(root) == STEPS
    assert final.read_bytes() == reference.read_bytes(), out
    # The same state prints the same digest.
    digest = re.compile(r"final state sha256: [0-9a-f]{64}")
    assert digest.search(out).group() == digest.search(ran_through).group()
