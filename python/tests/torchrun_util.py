"""Running a script under torchrun for the tests, and their shared skip."""

import os
import signal
import subprocess
import sys
import tempfile
import warnings

import pytest

import ckpt


def skip_module(test, why):
    """Skips the calling test module, saying why in a warning too: pytest -q
    (as CTest runs it) prints warnings, not the reasons of skips."""
    warnings.warn(pytest.PytestWarning(f"{test} skipped: {why}"))
    pytest.skip(why, allow_module_level=True)


def skip_without_torchrun(test):
    """Skips the calling module where torch.distributed cannot run jobs."""
    try:
        import torch.distributed as dist
    except ImportError as e:
        skip_module(test, f"PyTorch is not importable ({e}): no torchrun "
                          f"jobs")
    if not dist.is_available():
        skip_module(test, "this PyTorch has no torch.distributed: no "
                          "torchrun jobs")


def torchrun(n, script, args, *, extra=(), timeout=120):
    """Runs `script` ARGS on n processes under torchrun; (exit code, stdout,
    stderr). A job past `timeout` seconds fails the test (torchrun and its
    workers are killed) instead of stalling it."""
    env = dict(os.environ)
    # The job imports the very package under test.
    package_dir = os.path.dirname(os.path.dirname(ckpt.__file__))
    env["PYTHONPATH"] = os.pathsep.join(
        [package_dir] + [p for p in [env.get("PYTHONPATH")] if p])
    env["OMP_NUM_THREADS"] = "1"
    # --redirects 1 --tee 1: torchrun 1.13 under Python 3.11 cannot parse
    # its default "0" for these (a Std flag it cannot find by value).
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node", str(n), "--redirects", "1", "--tee", "1",
           *extra, script, *[str(a) for a in args]]
    # torchrun makes a torchelastic_* folder a job in the temporary folder
    # and leaves it there: one of the job's own, removed afterwards.
    with tempfile.TemporaryDirectory(prefix="ckpt-torchrun-") as tmp:
        env["TMPDIR"] = tmp
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its workers
            out, err = proc.communicate()
            pytest.fail(f"torchrun -n {n} {' '.join(map(str, args))} "
                        f"hung:\n{out}{err}")
    return proc.returncode, out, err
