"""Python's all-or-nothing load_into beside the streaming one, each the
first load of a process, as a resumed job does it.

    python bench/load_into.py [--gib 1] [--rounds 3] [--dir DIR] [--json]

Saves a state of --gib GiB of float32 NumPy arrays (8 arrays) to a fresh
file:// root under DIR (default /var/tmp), then, for each mode, starts a
process of its own that opens the root, builds the state anew (new arrays,
touched, as a restarted job builds its model) and loads into it --rounds
times cold (the root's pages dropped from the page cache first, as after a
restart) and --rounds times warm:
  streaming      load_into(transactional=False): straight into the arrays;
  transactional  load_into(), the default: every chunk checked before any
                 array changes (the library's load: O_DIRECT into the
                 manager's staging memory where the files are cold, in
                 place where they lie in the page cache), then copied;
  torch          ckpt.torch.load() into a state dict of CPU tensors (when
                 PyTorch is installed): read into new tensors (the first
                 load's memory, which the manager keeps for the later
                 ones), then their bytes exchanged with the state's.
The modes take turns, twice. Every load's bytes are checked (a sample).
The torch processes also time one copy of the state into other tensors
already touched (torch's copy_, on every core), for the floor.

Prints per mode the first load's time and the medians of the later cold
and warm ones, and ratios.load_into_vs_streaming (the worse of cold and
warm), ratios.first_load_into_vs_streaming (the first loads, cold), and
the same for torch (torch_load_vs_streaming, first_torch_load_vs_...),
and torch_load_vs_floor: torch's time over the floor, the streaming
load's plus one copy (the worse of cold and warm).
A measurement, not a test: exits 0 whatever the figures.
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

from load_common import drop_cache, parse_load_flags

TENSORS = 8


def one_process(root, n, mode, rounds):
    """Runs in the child: the first load, then the cold and warm ones."""
    import numpy as np
    import ckpt
    drop_cache(root)
    if mode == "torch":
        import torch
        import ckpt.torch
        tensors = {f"t{i}": torch.ones(n) for i in range(TENSORS)}
        state = {k: t.numpy() for k, t in tensors.items()}  # the same memory
    else:
        mgr = ckpt.open("file://" + root)
        state = {f"t{i}": np.ones(n, dtype=np.float32) for i in range(TENSORS)}
    transactional = mode == "transactional"

    def load(cold):
        for a in state.values():
            a.fill(0)
        if cold:
            drop_cache(root)
        start = time.perf_counter()
        if mode == "torch":
            ckpt.torch.load(tensors, "file://" + root, step=1)
        else:
            mgr.load_into(state, step=1, transactional=transactional)
        seconds = time.perf_counter() - start
        for i, a in enumerate(state.values()):
            if a[::4097].tolist() != (np.arange(0, n, 4097, dtype=np.float32)
                                      + i).tolist():
                sys.exit(f"load_into: wrong bytes in t{i}")
        return seconds

    first = load(True)
    cold, warm = [], []
    for _ in range(rounds):
        cold.append(load(True))
        warm.append(load(False))
    out = {"first_s": first, "cold_s": cold, "warm_s": warm}
    if mode == "torch":
        copies = {k: torch.zeros_like(t) for k, t in tensors.items()}
        out["copy_s"] = []
        for _ in range(rounds):
            start = time.perf_counter()
            for k, t in tensors.items():
                copies[k].copy_(t)
            out["copy_s"].append(time.perf_counter() - start)
    print(json.dumps(out))


def main():
    a = parse_load_flags(
        __doc__, "load_into.py",
        lambda p: p.add_argument("--child", nargs=3, help=argparse.SUPPRESS))
    n = int(a.gib * (1 << 30)) // 4 // TENSORS
    if a.child:
        one_process(a.child[0], n, a.child[1], int(a.child[2]))
        return
    import numpy as np
    import ckpt
    work = tempfile.mkdtemp(prefix="ckpt-bench-load-into-", dir=a.dir)
    root = os.path.join(work, "root")
    try:
        mgr = ckpt.open("file://" + root, create=True)
        mgr.save(1, {f"t{i}": np.arange(n, dtype=np.float32) + i
                     for i in range(TENSORS)})
        mgr.close()
        runs = {"streaming": [], "transactional": []}
        try:
            import torch  # noqa: F401 - only whether it is there
            runs["torch"] = []
        except ImportError:
            print("PyTorch is not installed: no torch mode")
        for _ in range(2):
            for mode in runs:
                out = subprocess.run(
                    [sys.executable, __file__, "--gib", str(a.gib),
                     "--child", root, mode, str(a.rounds)],
                    check=True, capture_output=True, text=True).stdout
                runs[mode].append(json.loads(out.strip().splitlines()[-1]))
        modes = {}
        for mode, rs in runs.items():
            modes[mode] = {
                "first_s": statistics.median(r["first_s"] for r in rs),
                "cold_s": statistics.median(x for r in rs for x in r["cold_s"]),
                "warm_s": statistics.median(x for r in rs for x in r["warm_s"]),
            }
        s, t = modes["streaming"], modes["transactional"]
        ratios = {
            "load_into_vs_streaming": max(t["cold_s"] / s["cold_s"],
                                          t["warm_s"] / s["warm_s"]),
            "first_load_into_vs_streaming": t["first_s"] / s["first_s"],
        }
        if "torch" in modes:
            t = modes["torch"]
            ratios["torch_load_vs_streaming"] = max(t["cold_s"] / s["cold_s"],
                                                    t["warm_s"] / s["warm_s"])
            ratios["first_torch_load_vs_streaming"] = (t["first_s"]
                                                       / s["first_s"])
            copy = statistics.median(x for r in runs["torch"]
                                     for x in r["copy_s"])
            t["copy_s"] = copy
            ratios["torch_load_vs_floor"] = max(
                t["cold_s"] / (s["cold_s"] + copy),
                t["warm_s"] / (s["warm_s"] + copy))
        gib = n * 4 * TENSORS / (1 << 30)
        for mode, m in modes.items():
            print(f"{mode:13s} first {m['first_s']:.3f} s | cold "
                  f"{m['cold_s']:.3f} s ({gib / m['cold_s']:.2f} GiB/s) | "
                  f"warm {m['warm_s']:.3f} s"
                  + (f" | one copy {m['copy_s']:.3f} s" if "copy_s" in m
                     else ""))
        print("ratios: " + ", ".join(f"{k} {v:.3f}"
                                     for k, v in ratios.items()))
        if a.json:
            print(json.dumps({"state_bytes": n * 4 * TENSORS,
                              "rounds": a.rounds, "processes_per_mode": 2,
                              "modes": modes, "ratios": ratios}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
