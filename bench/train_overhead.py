#!/usr/bin/env python3
"""What checkpoints cost a training run: the same PyTorch training three
times, without checkpoints, with ckpt.torch.async_save every --every steps,
and with ckpt.torch.save every --every steps, and the run-time ratios.

    PYTHONPATH=build/release/python .venv/bin/python bench/train_overhead.py \\
        [--state-gib 1] [--steps 60] [--every 20] [--rounds 2] [--dir DIR]
        [--json]

The model is a stack of square float32 Linear layers sized so that its
parameters and Adam's two moments make --state-gib GiB; each step is a
forward and backward pass over a small batch and an Adam step, on the GPU
where --device cuda is given and PyTorch has CUDA, else on the CPU. Every
run starts from the same weights and saves the model and the optimizer
(Stateful objects) into a fresh root under --dir; a save in flight is
waited for before the next one and at the end, so the async figure includes
whatever the last save still had to do. The three runs alternate over
--rounds rounds (none, async, sync, then sync, async, none, ...), so that
the first run's fresh pages and a drifting machine weigh on each mode
alike; each figure is the fastest of its rounds. The figure users care about is
ratio_async: the run time with asynchronous checkpoints over the run time
without (CheckFreq's published bound is 1.035).
"""

import argparse
import json
import math
import os
import shutil
import tempfile
import time

import torch

import ckpt.torch as ct


def make_model(state_bytes, device):
    # Parameters + two Adam moments, float32: 12 bytes per parameter.
    params = state_bytes / 12
    layers = 4
    width = int(math.sqrt(params / layers))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False)
                                  for _ in range(layers)]).to(device)
    return model, width


def run(mode, args, device, root):
    model, width = make_model(args.state_gib * (1 << 30), device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    g = torch.Generator(device="cpu").manual_seed(1)
    batches = [torch.randn(args.batch, width, generator=g).to(device)
               for _ in range(4)]
    # One step before the clock starts: Adam's moments exist from here, so
    # every save of the run writes the same bytes.
    pending = None
    start = None
    for step in range(args.steps + 1):
        if step == 1:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
        x = batches[step % len(batches)]
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if mode != "none" and step > 0 and step % args.every == 0:
            state = {"model": model, "optim": opt}
            if mode == "async":
                if pending is not None:
                    pending.wait()
                pending = ct.async_save(state, root, step)
            else:
                ct.save(state, root, step)
    if pending is not None:
        pending.wait()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    ct.close()
    state_bytes = sum(p.numel() * p.element_size() * 3
                      for p in model.parameters())
    return seconds, state_bytes


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--state-gib", type=float, default=1.0)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--every", type=int, default=20)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dir", default="/var/tmp")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    device = torch.device(args.device)
    times = {"none": [], "async": [], "sync": []}
    work = tempfile.mkdtemp(prefix="ckpt-train-overhead-", dir=args.dir)
    try:
        order = list(times)
        for _ in range(args.rounds):
            for mode in order:
                root = os.path.join(work, mode)
                seconds, state_bytes = run(mode, args, device, root)
                times[mode].append(seconds)
                shutil.rmtree(root, ignore_errors=True)
            order.reverse()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures = {f"{mode}_seconds": min(t) for mode, t in times.items()}
    figures.update({f"{mode}_seconds_all": t for mode, t in times.items()})
    report = {
        "config": {"state_bytes": state_bytes, "steps": args.steps,
                   "every": args.every, "saves": args.steps // args.every,
                   "rounds": args.rounds,
                   "device": str(device), "threads": torch.get_num_threads(),
                   "dir": args.dir},
        "figures": figures,
        "ratios": {"async_vs_none": figures["async_seconds"]
                   / figures["none_seconds"],
                   "sync_vs_none": figures["sync_seconds"]
                   / figures["none_seconds"]},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    c = report["config"]
    print(f"train_overhead: {c['state_bytes'] / (1 << 30):.2f} GiB of state "
          f"(parameters + Adam), {c['steps']} steps, a save every "
          f"{c['every']} ({c['saves']} saves), {c['device']}, "
          f"{c['threads']} threads")
    for mode in ("none", "async", "sync"):
        every = ", ".join(f"{s:.2f}" for s in figures[f"{mode}_seconds_all"])
        print(f"  {mode:6} {figures[f'{mode}_seconds']:8.2f} s  ({every})")
    for key, value in report["ratios"].items():
        print(f"  {key:14} {value:.3f}")


if __name__ == "__main__":
    main()
