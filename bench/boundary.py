#!/usr/bin/env python3
"""What the Python package's path through the C API adds to a save.

    PYTHONPATH=build/release/python .venv/bin/python bench/boundary.py \\
        --cxx build/release/bench/bench_boundary [--root mem|file] \\
        [--runs 7] [--json]

Two states, each saved --runs times through Python (ckpt.open(...).save,
NumPy arrays: flattening, entries, the ctypes calls) and through C++
(bench_boundary, which builds a ckpt::State of the same tensors and calls
CheckpointManager::Save), in one run, alternating:

  small   10,000 float32 tensors of 256 elements (1 KiB each, 10 MiB)
  large   64 float32 tensors of 4 Mi elements (16 MiB each, 1 GiB)

--root mem (the default) saves to an in-process mem:// root, so that the
disk's run-to-run noise does not hide the boundary's cost; --root file
saves to a file:// root under --dir. Printed: the median seconds of each
and Python's median divided by C++'s (the target for the large state:
within 1.10).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import ckpt

STATES = {"small": (10000, 256), "large": (64, 4 << 20)}


def python_saves(root, count, elements, runs):
    tensors = [np.full(elements, i, dtype=np.float32) for i in range(count)]
    mgr = ckpt.open(root, keep_last=1)
    times = []
    for run in range(1, runs + 1):
        t0 = time.perf_counter()
        mgr.save(run, {"layers": {str(i): {"weight": t}
                                  for i, t in enumerate(tensors)}})
        times.append(time.perf_counter() - t0)
    del mgr
    return times


def cxx_saves(cxx, root, count, elements, runs):
    out = subprocess.run([cxx, root, str(count), str(elements), str(runs)],
                         check=True, capture_output=True, text=True).stdout
    return [float(line) for line in out.split()]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cxx", required=True, help="the bench_boundary program")
    p.add_argument("--root", choices=["mem", "file"], default="mem")
    p.add_argument("--dir", default=None, help="where file roots go")
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    base = tempfile.mkdtemp(prefix="ckpt-boundary-", dir=a.dir)
    report = {"root": a.root, "runs": a.runs, "states": {}}
    try:
        for name, (count, elements) in STATES.items():
            py, cxx = [], []
            # Alternate, a few runs at a time, so that drift hits both.
            for rnd in range(2):
                for side in ("python", "cxx"):
                    tag = f"{name}-{side}-{rnd}"
                    root = (f"mem://{tag}" if a.root == "mem"
                            else os.path.join(base, tag))
                    if side == "python":
                        py += python_saves(root, count, elements, a.runs)
                    else:
                        cxx += cxx_saves(a.cxx, root, count, elements,
                                         a.runs)
            # The first save of each manager takes the root's lease and
            # creates its folders: report the steady state.
            py_s = statistics.median(py[1:a.runs] + py[a.runs + 1:])
            cxx_s = statistics.median(cxx[1:a.runs] + cxx[a.runs + 1:])
            report["states"][name] = {
                "tensors": count, "bytes": count * elements * 4,
                "python_s": py_s, "cxx_s": cxx_s, "ratio": py_s / cxx_s}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if a.json:
        print(json.dumps(report, indent=2))
        return
    print(f"root {a.root}://, {a.runs} saves each, twice, alternating; "
          f"medians without each manager's first save")
    for name, r in report["states"].items():
        print(f"{name:6} {r['tensors']:6} tensors {r['bytes'] / 2**20:8.1f} "
              f"MiB  python {r['python_s']:.4f} s  c++ {r['cxx_s']:.4f} s  "
              f"python/c++ {r['ratio']:.3f}")


if __name__ == "__main__":
    sys.exit(main())
