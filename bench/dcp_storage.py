#!/usr/bin/env python3
"""PyTorch's distributed checkpoint (DCP) on two storages, one state, one
process: dcp.save, dcp.async_save and dcp.load through DCP's
FileSystemWriter / FileSystemReader and through ckpt.torch.StorageWriter /
StorageReader, and the ratios.

    PYTHONPATH=build/release/python .venv/bin/python bench/dcp_storage.py \\
        [--size-mib 256] [--tensors 16] [--runs 3] [--dir DIR] [--json]

The state is --tensors float32 tensors of --size-mib MiB in all. Each run
saves it with dcp.save into a fresh folder (FileSystemWriter) and a fresh
root (StorageWriter), then with dcp.async_save, timing both how long the
call blocks the caller (DCP copies the state to CPU memory first, then
saves on a thread) and how long until its future is done, then loads each
with dcp.load into preallocated tensors and checks the bytes. The storages
alternate within and between runs; each figure is the fastest of --runs.

Durability, as each storage has it by default: FileSystemWriter
(sync_files=True) fsyncs every data file and the .metadata file before
renaming it into place (the folder itself is not fsynced); ckpt makes every
data object durable, then commits the step's manifest, which names every
chunk's checksum. Loads read files written a moment before (the page
cache), and ckpt's check every chunk's checksum and read into new memory
before the state's tensors are written (all or nothing).
"""

import argparse
import json
import os
import shutil
import tempfile
import time
import warnings

import torch
import torch.distributed.checkpoint as dcp

import ckpt.torch as ct

# One process, no process group: what DCP says it assumes.
warnings.filterwarnings("ignore", message="torch.distributed is disabled")
warnings.filterwarnings("ignore", category=FutureWarning)


def make_state(size_mib, tensors):
    n = (size_mib << 20) // 4 // tensors
    g = torch.Generator().manual_seed(0)
    return {f"layer{i}.weight": torch.randn(n, generator=g)
            for i in range(tensors)}


def storages():
    """{name: (writer of a path, reader of a path)}."""
    def fs_writer(path):
        return dcp.FileSystemWriter(path)

    def fs_reader(path):
        return dcp.FileSystemReader(path)

    return {"FileSystemWriter": (fs_writer, fs_reader),
            "ckpt StorageWriter": (ct.StorageWriter, ct.StorageReader)}


def one_run(name, make_writer, make_reader, state, where, run):
    out = {}
    path = os.path.join(where, f"{name.split()[0]}-{run}")
    writer = make_writer(path)
    t = time.perf_counter()
    dcp.save(state, storage_writer=writer)
    out["save"] = time.perf_counter() - t
    path2 = path + "-async"
    writer2 = make_writer(path2)
    t = time.perf_counter()
    future = dcp.async_save(state, storage_writer=writer2)
    out["async_blocked"] = time.perf_counter() - t
    future.result()
    out["async_total"] = time.perf_counter() - t
    target = {k: torch.empty_like(v) for k, v in state.items()}
    t = time.perf_counter()
    dcp.load(target, storage_reader=make_reader(path))
    out["load"] = time.perf_counter() - t
    for k, v in state.items():
        if not torch.equal(target[k], v):
            raise SystemExit(f"{name}: {k} did not load back")
    for w in (writer, writer2):
        if hasattr(w, "close"):
            w.close()
    for p in (path, path2):
        shutil.rmtree(p)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mib", type=int, default=256)
    p.add_argument("--tensors", type=int, default=16)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--dir", default=None,
                   help="where the checkpoints go (default: a temporary "
                        "folder)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    state = make_state(args.size_mib, args.tensors)
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    where = tempfile.mkdtemp(prefix="dcp-bench-", dir=args.dir)
    kinds = storages()
    best = {name: {} for name in kinds}
    try:
        for run in range(args.runs):
            order = list(kinds) if run % 2 == 0 else list(kinds)[::-1]
            for name in order:
                got = one_run(name, *kinds[name], state, where, run)
                for key, seconds in got.items():
                    best[name][key] = min(best[name].get(key, seconds),
                                          seconds)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    fs, ck = best["FileSystemWriter"], best["ckpt StorageWriter"]
    report = {
        "config": {"bytes": nbytes, "tensors": args.tensors,
                   "runs": args.runs, "torch": torch.__version__,
                   "cpus": os.cpu_count()},
        "seconds": best,
        "gb_per_s": {name: {k: nbytes / s / 1e9 for k, s in b.items()}
                     for name, b in best.items()},
        "ratio_ckpt_over_fs": {k: ck[k] / fs[k] for k in fs},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"dcp_storage: {nbytes / (1 << 20):.0f} MiB in {args.tensors} "
          f"float32 tensors, fastest of {args.runs} runs, torch "
          f"{torch.__version__}")
    print(f"  {'':22} {'FileSystemWriter':>22} {'ckpt StorageWriter':>22}"
          f" {'ckpt / fs':>10}")
    for key, what in (("save", "dcp.save"),
                      ("async_blocked", "async_save blocks"),
                      ("async_total", "async_save until done"),
                      ("load", "dcp.load")):
        cells = [f"{b[key]:7.3f} s {nbytes / b[key] / 1e9:6.2f} GB/s"
                 for b in (fs, ck)]
        print(f"  {what:22} {cells[0]:>22} {cells[1]:>22} "
              f"{ck[key] / fs[key]:10.2f}")


if __name__ == "__main__":
    main()
