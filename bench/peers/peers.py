#!/usr/bin/env python3
"""ckpt beside torch.save, safetensors, DCP, Orbax and Keras: save and load
of one state, in one run, on one disk.

    PYTHONPATH=build/release/python .venv/bin/python bench/peers/peers.py \\
        [--size 2GiB] [--runs 3] [--warmup 1] [--dir DIR] [--only A,B]
        [--json]

The state is what a training job checkpoints, --size bytes in all (a unit:
B, KiB, MiB, GiB): 8 large weights (bfloat16 and float32 in turn) and 128
small ones (1 KiB to 64 KiB: norms and biases; float32 and bfloat16), each
with Adam's two float32 moments and its step (a 0-d tensor), and a global
step (int32, JAX's default integer): 545 torch tensors, every page written
(torch.randn). Orbax gets the same bytes as JAX arrays on the CPU. The
libraries (bench/peers/libraries.py says how each is called):

  ckpt          ckpt.open(root).save(step, state) (its fsync and commit);
                load(step, as_torch=True): new tensors
  ckpt async    save_async(step, state): the caller is blocked for the
                copy into ckpt's staging memory; handle.wait() to durable
  torch.save    torch.save of the nested dict; torch.load
  safetensors   save_file of the flattened dict; load_file
  dcp           torch.distributed.checkpoint.save / load through
                FileSystemWriter / FileSystemReader (one process, no
                process group; load fills tensors made before the timing)
  dcp async     dcp.async_save: blocked for its staging copy; its future
                to durable
  orbax         orbax.checkpoint.CheckpointManager, StandardSave /
                StandardRestore, synchronous
  orbax async   the same with asynchronous checkpointing: save() returns,
                wait_until_finished() to durable
  ckpt.jax      ckpt.jax.CheckpointManager (ckpt's Orbax-shaped API) on
                the same JAX arrays, async_save=False; restore(step,
                target=the arrays' shapes, dtypes and shardings)
  ckpt.jax async  the same, asynchronous (its default): save() returns
                once the arrays are taken (JAX arrays do not change: the
                library copies them on its own thread, as Orbax writes
                them without a copy); wait_until_finished() to durable
  keras         Keras 3's keras.callbacks.BackupAndRestore: its backup
                (on_epoch_end) and its restore (a new callback's
                on_train_begin) of a built model holding the state's
                weights and an Adam optimizer built on them (moments of
                each weight's dtype: fewer bytes than --size); Keras's
                backend is $KERAS_BACKEND, jax unless set
  ckpt.keras    ckpt.keras.BackupAndRestore on the same model

Durable alike: ckpt fsyncs what it writes and commits; for every peer the
timing ends after an fsync of every file and folder it wrote and of the
folder holding them (DCP's writer fsyncs its data files already; a second
fsync of a clean file is nearly free). Page cache alike:
after each save, every file the library wrote is dropped from the cache
(posix_fadvise DONTNEED, clean after the fsync) so that every load reads
the disk (ckpt reads with O_DIRECT anyway); each load's timing ends once a
byte of every page of what it returned has been read (safetensors maps its
file). Every load is checked bit for bit against the state outside the
timing. Rounds rotate the order of the libraries; --warmup untimed rounds
first (thread pools, ckpt's staging memory, imports), as a job's first
save is not its typical one. Files are removed between rounds outside the
timing.

Printed (--json): each library's median seconds and GB/s of save (to
durable), stall (asynchronous ones) and load, their ranges, whether every
load was verified, and `ratios`: peer time / ckpt time (above 1: ckpt is
faster), the median's ratio and the min and max of the rounds' own ratios.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

# libraries.py, beside this file, is imported when a run starts: the other
# benchmarks here import this module for fsync_path without PyTorch.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# (ratio, peer, its figure, ckpt's library, its figure): peer / ckpt.
RATIOS = [
    ("save_vs_torch_save", "torch.save", "save", "ckpt", "save"),
    ("load_vs_torch_load", "torch.save", "load", "ckpt", "load"),
    ("save_vs_safetensors", "safetensors", "save", "ckpt", "save"),
    ("load_vs_safetensors", "safetensors", "load", "ckpt", "load"),
    ("save_vs_dcp", "dcp", "save", "ckpt", "save"),
    ("load_vs_dcp", "dcp", "load", "ckpt", "load"),
    ("stall_vs_dcp_async", "dcp async", "stall", "ckpt async", "stall"),
    ("durable_vs_dcp_async", "dcp async", "save", "ckpt async", "save"),
    # Orbax beside ckpt.jax on the same JAX arrays (beside the torch
    # tensors' ckpt where ckpt.jax is missing: ratio_of says which).
    ("save_vs_orbax", "orbax", "save", "ckpt.jax|ckpt", "save"),
    ("load_vs_orbax", "orbax", "load", "ckpt.jax|ckpt", "load"),
    ("stall_vs_orbax_async", "orbax async", "stall",
     "ckpt.jax async|ckpt async", "stall"),
    ("durable_vs_orbax_async", "orbax async", "save",
     "ckpt.jax async|ckpt async", "save"),
    ("save_vs_keras", "keras", "save", "ckpt.keras", "save"),
    ("load_vs_keras", "keras", "load", "ckpt.keras", "load"),
]

UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
         "kb": 10**3, "mb": 10**6, "gb": 10**9}


def parse_size(text):
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a size such as 512MiB, 2GiB or 1000000")
    return int(float(m.group(1)) * UNITS[m.group(2).lower()])


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable(path):
    fsync_path(path)
    fsync_path(os.path.dirname(path))


def remove(path):
    """Frees the disk for the next library (ckpt's retention does it)."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.unlink(path)


def make_state(nbytes, seed=0):
    """The optimizer-like state of about `nbytes` bytes (module docstring):
    a dict of torch tensors."""
    import torch
    g = torch.Generator().manual_seed(seed)
    large = [(8, torch.bfloat16), (4, torch.float32), (2, torch.bfloat16),
             (2, torch.float32), (1, torch.bfloat16), (1, torch.float32),
             (1, torch.bfloat16), (1, torch.float32)]
    small = [(256 << (2 * (j % 4)),
              torch.float32 if j % 3 else torch.bfloat16) for j in range(128)]

    def width(dtype):
        return torch.tensor([], dtype=dtype).element_size()

    def cost(n, dtype):  # the weight, two float32 moments, a 0-d step
        return n * (width(dtype) + 8) + 4
    # The small ones keep their sizes unless they would pass 5% of a small
    # state; the large ones share the rest by their weights.
    small_cost = sum(cost(n, d) for n, d in small)
    scale = min(1.0, 0.05 * nbytes / small_cost)
    small = [(max(1, int(n * scale)), d) for n, d in small]
    rest = nbytes - sum(cost(n, d) for n, d in small) - 4 - 4 * len(large)
    unit = rest / sum(w * (width(d) + 8) for w, d in large)
    params = [(f"block{i}.linear.weight", max(1, int(w * unit)), d)
              for i, (w, d) in enumerate(large)]
    params += [(f"block{j // 2}.norm.{('weight', 'bias')[j % 2]}", n, d)
               for j, (n, d) in enumerate(small)]
    model, optim = {}, {}
    for name, n, dtype in params:
        model[name] = torch.randn(n, generator=g).to(dtype)
        optim[name] = {
            "exp_avg": torch.randn(n, generator=g).mul_(1e-3),
            "exp_avg_sq": torch.randn(n, generator=g).square_().mul_(1e-6),
            "step": torch.tensor(float(1000 + len(optim)))}
    step = torch.tensor(1000, dtype=torch.int32)
    return {"model": model, "optim": {"state": optim, "step": step}}


def state_bytes(state):
    from libraries import leaves
    return sum(t.numel() * t.element_size() for _, t in leaves(state))


def run(libs, names, runs, warmup, base):
    """Rounds of every library in `names` (rotated), the first `warmup`
    untimed. {name: {"save": [s], "stall": [s], "load": [s]}} per timed
    round, the set of libraries whose every load was verified, and
    {name: why} of those that failed (dropped from later rounds)."""
    from libraries import drop_cached
    times = {n: {"save": [], "stall": [], "load": []} for n in names}
    verified, failed = set(), {}
    names = list(names)
    for r in range(warmup + runs):
        timed = r >= warmup
        k = r % len(names) if names else 0
        for name in names[k:] + names[:k]:
            if name in failed:
                continue
            lib = libs[name]
            path = os.path.join(base, f"{name.replace(' ', '-')}-{r}")
            try:
                got = one(lib, path, drop_cached)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                failed[name] = f"{type(e).__name__}: {e}"
                verified.discard(name)
                continue
            finally:
                remove(path)
            if got.get("load") is not None:
                verified.add(name)
            if timed:
                for key, seconds in got.items():
                    if seconds is not None:
                        times[name][key].append(seconds)
    for name in failed:
        times.pop(name, None)
    return times, verified, failed


def one(lib, path, drop_cached):
    """One save of `lib` and, where it loads, one cold load checked after
    its timing; {"save": s, "stall": s, "load": s or None}."""
    out = {"load": None}
    if hasattr(lib, "before_save"):
        lib.before_save(path)
    t0 = time.perf_counter()
    finish = lib.save(path)
    t1 = time.perf_counter()
    if finish is not None:
        finish()
        out["stall"] = t1 - t0
    out["save"] = time.perf_counter() - t0
    if hasattr(lib, "after_save"):
        lib.after_save(path)
    if getattr(lib, "load", None) is None:
        return out
    drop_cached(lib.files(path) if hasattr(lib, "files") else path)
    if hasattr(lib, "before_load"):
        lib.before_load(path)
    t0 = time.perf_counter()
    loaded = lib.load(path)
    out["load"] = time.perf_counter() - t0
    if hasattr(lib, "after_load"):
        lib.after_load(path)
    lib.check(loaded)
    return out


def versions():
    out = {}
    for module in ("torch", "safetensors", "jax", "orbax.checkpoint"):
        try:
            m = __import__(module, fromlist=["_"])
            out[module] = getattr(m, "__version__", "?")
        except ImportError:
            pass
    return out


def main():
    from libraries import FACTORIES
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=parse_size, default=parse_size("2GiB"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--dir", default="")
    p.add_argument("--json", action="store_true")
    p.add_argument("--only", default=",".join(FACTORIES),
                   help="comma-separated subset of the libraries")
    a = p.parse_args()

    wanted = [s for s in a.only.split(",") if s]
    for s in wanted:
        if s not in FACTORIES:
            sys.exit(f"peers.py: unknown library {s!r} "
                     f"(known: {', '.join(FACTORIES)})")
    state = make_state(a.size)
    nbytes = state_bytes(state)
    if a.dir:
        os.makedirs(a.dir, exist_ok=True)
    base = tempfile.mkdtemp(prefix="ckpt-peers-", dir=a.dir or "/var/tmp")
    libs, missing = {}, {}
    try:
        for s in wanted:
            try:
                libs[s] = FACTORIES[s](state, base)
            except ImportError as e:
                missing[s] = str(e)
        times, verified, failed = run(libs, list(libs), a.runs, a.warmup,
                                      base)
        for lib in libs.values():
            if hasattr(lib, "close"):
                lib.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    sizes = {n: getattr(lib, "nbytes", nbytes) for n, lib in libs.items()}
    out = report(times, verified, failed, missing, sizes, nbytes, state, a)
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        print_table(out)


def report(times, verified, failed, missing, sizes, nbytes, state, a):
    from libraries import leaves
    med = {n: {k: statistics.median(v) for k, v in t.items() if v}
           for n, t in times.items()}
    ratios, ratio_of = {}, {}
    for key, peer, pk, ours, ok in RATIOS:
        ours = next((o for o in ours.split("|") if ok in med.get(o, {})),
                    None)
        if ours is None or pk not in med.get(peer, {}):
            continue
        rounds = [x / y for x, y in zip(times[peer][pk], times[ours][ok])]
        ratios[key] = {"median": med[peer][pk] / med[ours][ok],
                       "min": min(rounds), "max": max(rounds)}
        ratio_of[key] = [f"{peer} {pk}", f"{ours} {ok}"]
    figures = {k: {n: m[k] for n, m in med.items() if k in m}
               for k in ("save", "stall", "load")}
    return {
        "state_bytes": nbytes, "tensors": sum(1 for _ in leaves(state)),
        "runs": a.runs, "warmup": a.warmup, "cpus": os.cpu_count(),
        "versions": versions(),
        # What `ckpt bench --html --peers` draws: each save's GB/s.
        "seconds": figures["save"],
        "gbps": {n: sizes[n] / s / 1e9 for n, s in figures["save"].items()},
        "stall_seconds": figures["stall"],
        "load_seconds": figures["load"],
        "load_gbps": {n: sizes[n] / s / 1e9
                      for n, s in figures["load"].items()},
        # Those of a state other than the one of state_bytes (Keras's).
        "other_bytes": {n: b for n, b in sizes.items() if b != nbytes},
        "range_seconds": {n: {k: [min(v), max(v)] for k, v in t.items() if v}
                          for n, t in times.items()},
        "load_verified": {n: n in verified for n in times
                          if "load" in med[n]},
        "ratios": ratios, "ratio_of": ratio_of,
        "missing": missing, "failed": failed,
    }


def print_table(out):
    gib = out["state_bytes"] / 2**30
    print(f"peers: {gib:.2f} GiB in {out['tensors']} tensors, {out['runs']} "
          f"rounds (medians) after {out['warmup']} untimed, fsync included, "
          f"cold loads")
    print(f"  {'library':<14} {'save s':>8} {'GB/s':>6} {'stall s':>8}"
          f" {'load s':>8} {'GB/s':>6}")
    for n in out["seconds"]:
        cells = [out["stall_seconds"].get(n), out["load_seconds"].get(n),
                 out["load_gbps"].get(n)]
        stall, load, gbps = ("-" if c is None else f"{c:.3f}" for c in cells)
        print(f"  {n:<14} {out['seconds'][n]:8.3f} {out['gbps'][n]:6.2f}"
              f" {stall:>8} {load:>8} {gbps:>6}")
    print("  ratios, peer time / ckpt time (median, min-max of rounds):")
    for k, r in out["ratios"].items():
        print(f"  {k:<24} {r['median']:6.2f}  {r['min']:.2f}-{r['max']:.2f}")
    for n, why in {**out["missing"], **out["failed"]}.items():
        print(f"  {n}: {'not installed' if n in out['missing'] else 'failed'}"
              f": {why}")


# What bench/peers/peers_gpu.py builds on: ckpt's saver and rounds of saves.
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


if __name__ == "__main__":
    main()
