#!/usr/bin/env python3
"""ckpt beside torch.save, h5py and numpy.save, on the same state, in one run.

    PYTHONPATH=build/release/python .venv/bin/python bench/peers/peers.py \
        [--size-mib 2048] [--tensors 64] [--runs 5] [--dir DIR] [--json]

The state is --tensors float32 arrays of --size-mib MiB in all, every page
written. Each round saves it once with each library, in a fresh file under
DIR, and makes it durable the same way ckpt does (fsync of the file and of
its directory); rounds rotate the order of the libraries so none always runs
first on a rested disk. Printed: the median seconds and GB/s of each over the
rounds, and ckpt's time divided by each peer's (below 1: ckpt is faster).
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable(path):
    fsync_path(path)
    fsync_path(os.path.dirname(path))


def save_torch(state, path):
    import torch
    torch.save({k: torch.from_numpy(v) for k, v in state.items()}, path)
    durable(path)


def save_h5py(state, path):
    import h5py
    with h5py.File(path, "w") as f:
        for k, v in state.items():
            f.create_dataset(k, data=v)
    durable(path)


def save_numpy(state, path):
    # numpy.save writes one array per file; np.savez would zip them (and
    # copy every array into the archive first), so each array gets its own
    # .npy file in one directory, made durable together.
    os.mkdir(path)
    for k, v in state.items():
        with open(os.path.join(path, k + ".npy"), "wb") as f:
            np.save(f, v)
            f.flush()
            os.fsync(f.fileno())
    fsync_path(path)
    fsync_path(os.path.dirname(path))


def remove(path):
    """Frees the disk for the next saver (ckpt's retention does it)."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.unlink(path)


def run_rounds(savers, names, state, runs, base, settle=None):
    """Runs each saver in `names` once per round on `state`, in a fresh path
    under `base`, rotating the order; returns {name: [(blocked, finished)]}
    in seconds. A saver returns None, or a callable that waits for the save
    it started: the caller was blocked until the saver returned, and the
    save finished when the callable did. `settle` runs before each timing
    (and after a save, inside it): a device's queued work."""
    times = {s: [] for s in names}
    for r in range(runs):
        order = names[r % len(names):] + names[:r % len(names)]
        for s in order:
            path = os.path.join(base, f"{s}-{r}")
            if hasattr(savers[s], "before"):
                savers[s].before()
            if settle:
                settle()
            t0 = time.perf_counter()
            finish = savers[s](state, path)
            t1 = time.perf_counter()
            if finish is not None:
                finish()
            if settle:
                settle()
            times[s].append((t1 - t0, time.perf_counter() - t0))
            remove(path)
    return times


class CkptSaver:
    """ckpt's Save (fsync of the data file, the manifest and their
    directory included). The previous step is deleted before the timing
    starts, as the peers' files are removed after theirs."""

    def __init__(self, root):
        import ckpt
        self.mgr = ckpt.open(root, create=True)  # list() before the first save
        self.step = 0

    def before(self):
        for info in self.mgr.list():
            self.mgr.delete(info.step)

    def __call__(self, state, path):
        self.step += 1
        self.mgr.save(self.step, state)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mib", type=int, default=2048)
    p.add_argument("--tensors", type=int, default=64)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--dir", default="")
    p.add_argument("--json", action="store_true")
    p.add_argument("--only", default="ckpt,torch.save,h5py,numpy.save",
                   help="comma-separated subset of the savers")
    a = p.parse_args()

    base = a.dir or tempfile.mkdtemp(prefix="ckpt-peers-", dir="/var/tmp")
    os.makedirs(base, exist_ok=True)
    n = a.size_mib * (1 << 20) // 4 // a.tensors
    state = {}
    for t in range(a.tensors):
        arr = np.empty(n, dtype=np.float32)
        arr[:] = np.arange(n, dtype=np.float32) * (t + 1) * 1e-3
        state[f"layer{t:03d}.weight"] = arr
    nbytes = sum(v.nbytes for v in state.values())

    savers = {
        "ckpt": CkptSaver(os.path.join(base, "ckpt-root")),
        "torch.save": save_torch,
        "h5py": save_h5py,
        "numpy.save": save_numpy,
    }
    names = [s for s in a.only.split(",") if s]
    for s in names:
        if s not in savers:
            sys.exit(f"peers.py: unknown saver {s!r}")
    try:
        rounds = run_rounds(savers, names, state, a.runs, base)
    finally:
        if not a.dir:
            shutil.rmtree(base, ignore_errors=True)
    times = {s: [finished for _, finished in v] for s, v in rounds.items()}

    med = {s: statistics.median(v) for s, v in times.items()}
    out = {
        "state_bytes": nbytes, "tensors": a.tensors, "runs": a.runs,
        "seconds": med,
        "gbps": {s: nbytes / v / 1e9 for s, v in med.items()},
        "range_seconds": {s: [min(v), max(v)] for s, v in times.items()},
        "ckpt_time_vs": ({s: med["ckpt"] / v for s, v in med.items()
                          if s != "ckpt"} if "ckpt" in med else {}),
    }
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"peers: {nbytes / 2**30:.2f} GiB in {a.tensors} float32 arrays, "
          f"{a.runs} rounds (medians), fsync included")
    print(f"  {'saver':<12} {'seconds':>8} {'GB/s':>7} {'range s':>15}"
          f" {'ckpt time / this':>17}")
    for s in names:
        lo, hi = out["range_seconds"][s]
        vs = out["ckpt_time_vs"].get(s)
        print(f"  {s:<12} {med[s]:8.3f} {out['gbps'][s]:7.3f}"
              f" {lo:7.2f}-{hi:<7.2f} {'-' if vs is None else f'{vs:17.2f}'}")


if __name__ == "__main__":
    main()
