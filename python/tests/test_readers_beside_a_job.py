"""Readers beside a job that saves with retention (docs/concurrency.md:
loads and `ckpt verify` are safe with anything): a step deleted while a
reader reads it (the job's keep_last) is no damage and no failure; the
reader lists again and goes on to the newest step."""

import subprocess
import sys
import threading
import time

import numpy as np

import ckpt


def test_loads_and_verify_beside_a_job_that_keeps_one_step(tmp_path):
    root = str(tmp_path / "run")
    saver = ckpt.open(root, create=True, keep_last=1)
    saver.save(0, {"a": np.zeros(1 << 20, np.float32), "step": 0})
    stop = threading.Event()
    saved = []

    def save():
        step = 1
        while not stop.is_set():
            saver.save(step, {"a": np.full(1 << 20, step, np.float32),
                              "step": step}, incremental=step % 3 != 0)
            saved.append(step)
            step += 1

    job = threading.Thread(target=save)
    job.start()
    loads, verifies, failures = 0, 0, []
    try:
        reader = ckpt.open(root)
        end = time.monotonic() + 8
        while time.monotonic() < end:
            for _ in range(4):
                state = reader.load()
                loads += 1
                if not (state["a"] == state["step"]).all():
                    failures.append(f"load: step {state['step']} mixed")
            r = subprocess.run([sys.executable, "-m", "ckpt", "verify", root],
                               capture_output=True, text=True, check=False)
            verifies += 1
            if r.returncode != 0:
                failures.append(f"verify: {r.stderr.strip()}")
    finally:
        stop.set()
        job.join()
        saver.close()
    print(f"{loads} loads and {verifies} verifies beside {len(saved)} saves")
    assert len(saved) > 20, "the job saved too little to race the readers"
    assert not failures, failures
