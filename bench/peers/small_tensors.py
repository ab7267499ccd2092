#!/usr/bin/env python3
"""ckpt beside torch.save and torch.load on many small tensors, in one run.

    PYTHONPATH=build/release/python .venv/bin/python \\
        bench/peers/small_tensors.py [--tensors 10000] [--elements 1024] \\
        [--runs 5] [--dir /var/tmp] [--json]

The state is what an optimizer keeps per parameter: {"opt.<i>":
torch.randn(--elements)} for --tensors tensors (default 10,000 float32
tensors of 4 KiB, 40 MiB). Each round, alternating which goes first:

  ckpt save        ckpt.open(fresh root).save(1, state): the manager's
                   opening, taking the root's lease, the data, fsync and
                   the commit
  torch.save       torch.save(state, fresh file), then fsync of the file
                   and of its folder (what ckpt's save makes durable)
  ckpt load        ckpt.open(that root).load(as_torch=True): torch tensors,
                   as torch.load returns
  torch.load       torch.load(that file)

Every round's roots and files are fresh, under a new folder in --dir, and
removed after the round. The loaded tensors are checked against the saved
ones bit for bit (outside the timing). Printed: the best and median seconds
of each, and ckpt's best divided by torch's best: save_vs_torch_save and
load_vs_torch_load (the targets: each at most 0.5). Without torch it prints
why and exits 0.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from peers import fsync_path  # beside this file


def torch_save(torch, state, path):
    torch.save(state, path)
    fsync_path(path)
    fsync_path(os.path.dirname(path))


def same_bits(torch, saved, loaded, who):
    """Raises unless `loaded` holds exactly `saved`'s names, dtypes, shapes
    and bytes."""
    if set(saved) != set(loaded):
        raise SystemExit(f"small_tensors.py: {who} loaded other names")
    for k, t in saved.items():
        u = loaded[k]
        if not isinstance(u, torch.Tensor) or u.dtype != t.dtype or \
                u.shape != t.shape:
            raise SystemExit(f"small_tensors.py: {who}: {k!r} is "
                             f"{type(u).__name__} {getattr(u, 'dtype', '')}")
        # Bits, not values: equal floats may differ in bits (-0.0, NaNs).
        if not torch.equal(t.view(torch.int32), u.view(torch.int32)):
            raise SystemExit(f"small_tensors.py: {who}: {k!r} differs")


def run(torch, ckpt, state, runs, base):
    times = {"ckpt_save": [], "torch_save": [], "ckpt_load": [],
             "torch_load": []}
    for r in range(runs):
        folder = os.path.join(base, f"round-{r}")
        os.mkdir(folder)
        root = os.path.join(folder, "ckpt-root")
        path = os.path.join(folder, "state.pt")
        sides = ["ckpt", "torch"] if r % 2 == 0 else ["torch", "ckpt"]
        for side in sides:
            if side == "ckpt":
                t0 = time.perf_counter()
                mgr = ckpt.open(root)
                mgr.save(1, state)
                times["ckpt_save"].append(time.perf_counter() - t0)
                del mgr  # gives the lease back, outside the timing
            else:
                t0 = time.perf_counter()
                torch_save(torch, state, path)
                times["torch_save"].append(time.perf_counter() - t0)
        for side in sides:
            if side == "ckpt":
                t0 = time.perf_counter()
                loaded = ckpt.open(root).load(as_torch=True)
                times["ckpt_load"].append(time.perf_counter() - t0)
                if r == runs - 1:
                    same_bits(torch, state, loaded, "ckpt")
            else:
                t0 = time.perf_counter()
                loaded = torch.load(path)
                times["torch_load"].append(time.perf_counter() - t0)
                if r == runs - 1:
                    same_bits(torch, state, loaded, "torch.load")
            del loaded
        shutil.rmtree(folder)
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tensors", type=int, default=10000)
    p.add_argument("--elements", type=int, default=1024,
                   help="float32 elements per tensor")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--dir", default="/var/tmp",
                   help="where each run's folder of fresh roots goes")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"small_tensors.py: skipped: torch is not importable ({e})")
        return 0
    import ckpt

    torch.manual_seed(0)
    state = {f"opt.{i}": torch.randn(a.elements) for i in range(a.tensors)}
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    base = tempfile.mkdtemp(prefix="ckpt-small-tensors-", dir=a.dir)
    try:
        times = run(torch, ckpt, state, a.runs, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    best = {k: min(v) for k, v in times.items()}
    out = {
        "tensors": a.tensors, "tensor_bytes": a.elements * 4,
        "state_bytes": nbytes, "runs": a.runs, "dir": a.dir,
        "best_seconds": best,
        "median_seconds": {k: statistics.median(v) for k, v in times.items()},
        "seconds": times,
        "save_vs_torch_save": best["ckpt_save"] / best["torch_save"],
        "load_vs_torch_load": best["ckpt_load"] / best["torch_load"],
        "torch_version": torch.__version__, "ckpt_version": ckpt.__version__,
    }
    if a.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"small tensors: {a.tensors} float32 tensors of "
          f"{a.elements * 4} bytes ({nbytes / 2**20:.1f} MiB), {a.runs} "
          f"rounds in {a.dir}, fsync included in saves")
    print(f"  {'':<12} {'best s':>8} {'median s':>9}")
    for k, label in (("ckpt_save", "ckpt save"), ("torch_save", "torch.save"),
                     ("ckpt_load", "ckpt load"), ("torch_load", "torch.load")):
        print(f"  {label:<12} {best[k]:8.3f} {out['median_seconds'][k]:9.3f}")
    print(f"  save_vs_torch_save {out['save_vs_torch_save']:.2f} (target "
          f"<= 0.5)")
    print(f"  load_vs_torch_load {out['load_vs_torch_load']:.2f} (target "
          f"<= 0.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
