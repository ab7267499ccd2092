#!/usr/bin/env python3
"""bench/peers/peers.py on a small state (ctest peers_smoke): every ratio
its docs quote is printed, positive and finite, and every library's load
was checked bit for bit; and the check itself catches one flipped bit, so
that "verified" means something.

    peers_smoke_test.py [--size 16MiB]

Needs the project's virtual environment (PyTorch, safetensors, JAX, Orbax)
and the package on PYTHONPATH; a library that is not installed fails it,
naming the library and why.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RATIOS = ["save_vs_dcp", "stall_vs_dcp_async", "durable_vs_dcp_async",
          "load_vs_dcp", "save_vs_orbax", "load_vs_orbax",
          "stall_vs_orbax_async", "durable_vs_orbax_async",
          "save_vs_torch_save", "load_vs_torch_load", "save_vs_safetensors",
          "load_vs_safetensors"]
LOADERS = ["ckpt", "torch.save", "safetensors", "dcp", "orbax"]
KERAS_RATIOS = ["save_vs_keras", "load_vs_keras"]
KERAS_LOADERS = ["keras", "ckpt.keras"]


def check_detects_a_flip():
    sys.path.insert(0, HERE)
    import torch
    from libraries import same
    from peers import make_state
    state = make_state(1 << 20)
    copy = {"model": {k: v.clone() for k, v in state["model"].items()},
            "optim": {"state": {k: {m: t.clone() for m, t in v.items()}
                                for k, v in state["optim"]["state"].items()},
                      "step": state["optim"]["step"].clone()}}
    same(state, copy, "a copy")  # equal: no error
    name = next(iter(copy["model"]))
    bits = copy["model"][name].view(torch.int16)
    bits[len(bits) // 2] ^= 1
    try:
        same(state, copy, "a flipped copy")
    except AssertionError:
        return
    sys.exit("peers_smoke: libraries.same() missed a flipped bit")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="16MiB")
    a = p.parse_args()
    check_detects_a_flip()
    import importlib.util
    if importlib.util.find_spec("ckpt.keras") is not None:
        RATIOS.extend(KERAS_RATIOS)
        LOADERS.extend(KERAS_LOADERS)
    else:
        print("no ckpt.keras in this package: Keras's BackupAndRestore "
              "is not compared, its ratios not checked")
    jax_side = importlib.util.find_spec("ckpt.jax") is not None
    if jax_side:
        LOADERS.append("ckpt.jax")
    else:
        print("no ckpt.jax in this package: Orbax is compared with ckpt "
              "on the torch tensors")
    t = time.monotonic()
    run = subprocess.run(
        [sys.executable, os.path.join(HERE, "peers.py"), "--size", a.size,
         "--runs", "1", "--json"], capture_output=True, text=True)
    print(f"peers.py --size {a.size} --runs 1 --json: exit {run.returncode}"
          f" in {time.monotonic() - t:.1f} s")
    sys.stderr.write(run.stderr)
    if run.returncode != 0:
        sys.exit(f"peers_smoke: peers.py failed:\n{run.stdout}")
    out = json.loads(run.stdout)
    problems = [f"{n}: {why}" for n, why in
                {**out["missing"], **out["failed"]}.items()]
    for k in RATIOS:
        r = out["ratios"].get(k)
        if r is None:
            problems.append(f"ratio {k} missing")
            continue
        for which in ("median", "min", "max"):
            v = r[which]
            if not (isinstance(v, (int, float)) and math.isfinite(v) and
                    v > 0):
                problems.append(f"ratio {k} {which} is {v!r}")
        print(f"  {k:<24} {r['median']:.2f}")
    for k, (_, ours) in out["ratio_of"].items():
        if "orbax" in k and jax_side and not ours.startswith("ckpt.jax"):
            problems.append(f"{k} divides by {ours}, not ckpt.jax's")
    for n in LOADERS:
        if out["load_verified"].get(n) is not True:
            problems.append(f"{n}: load not verified")
    if problems:
        sys.exit("peers_smoke: " + "; ".join(problems))
    print(f"every ratio positive and finite, loads verified: "
          f"{', '.join(LOADERS)}")


if __name__ == "__main__":
    main()
