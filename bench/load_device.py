"""The all-or-nothing load into GPU memory beside the streaming one.

    python bench/load_device.py [--gib 1] [--rounds 3] [--dir DIR]
                                [--device cuda:0] [--json]

Saves a state of --gib GiB of float32 CUDA tensors (16 tensors) with
ckpt.torch.save to a fresh root under DIR (default /var/tmp), then loads
it back into the same CUDA tensors, --rounds rounds of two modes, each cold
(the root's pages dropped from the page cache first, as after a restart)
and warm:
  transactional  the default: every chunk read into the page-locked staging
                 memory and checked before the first byte goes to the
                 device;
  streaming      transactional=False: each slab copied to the device as
                 soon as it is read and checked.
The first load of each mode (cold) is reported apart. Every load's bytes
are compared with the saved ones on the device. Then one save of the same
state compressed (zstd, staged through the page-locked memory) beside a raw
one: its stored bytes and time.

Prints the medians and ratios.device_transactional_vs_streaming (the worse
of cold and warm; the target is 1.05). A measurement, not a test: exits 0
whatever the figures; without CUDA it says so and exits 0.
"""
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from load_common import drop_cache, parse_load_flags


def main():
    args = parse_load_flags(
        __doc__, "load_device.py",
        lambda p: p.add_argument("--device", default="cuda:0"))
    import torch
    if not torch.cuda.is_available():
        print("load_device.py skipped: PyTorch sees no CUDA device")
        return
    import ckpt.torch as ct

    dev = torch.device(args.device)
    tensors = 16
    per = int(args.gib * (1 << 30) / 4 / tensors)
    g = torch.Generator(device=dev).manual_seed(1)
    # Trained-like values (a narrow spread near zero), so that the
    # compressed save has something to find.
    state = {f"t{i}": torch.randn(per, device=dev, generator=g) * 0.02
             for i in range(tensors)}
    saved = {k: v.clone() for k, v in state.items()}
    work = tempfile.mkdtemp(prefix="ckpt-load-device-", dir=args.dir)
    root = os.path.join(work, "root")
    try:
        t0 = time.perf_counter()
        raw = ct.save(state, root, 1)
        raw_s = time.perf_counter() - t0

        def load(transactional, cold):
            for v in state.values():
                v.zero_()
            torch.cuda.synchronize(dev)
            if cold:
                drop_cache(root)
            t0 = time.perf_counter()
            ct.load(state, root, 1, transactional=transactional)
            torch.cuda.synchronize(dev)
            seconds = time.perf_counter() - t0
            for k, v in state.items():
                if not torch.equal(v, saved[k]):
                    sys.exit(f"load_device.py: {k} did not come back")
            return seconds

        modes = {"transactional": True, "streaming": False}
        first = {m: load(t, True) for m, t in modes.items()}
        cold = {m: [] for m in modes}
        warm = {m: [] for m in modes}
        for _ in range(args.rounds):
            for m, t in modes.items():
                cold[m].append(load(t, True))
                warm[m].append(load(t, False))
        med = {m: (statistics.median(cold[m]), statistics.median(warm[m]))
               for m in modes}
        ratio = max(med["transactional"][0] / med["streaming"][0],
                    med["transactional"][1] / med["streaming"][1])

        packed_root = os.path.join(work, "packed")
        t0 = time.perf_counter()
        packed = ct.save(state, packed_root, 1, compression="zstd")
        packed_s = time.perf_counter() - t0
        back = {k: torch.zeros_like(v) for k, v in state.items()}
        ct.load(back, packed_root, 1)
        for k in state:
            if not torch.equal(back[k], saved[k]):
                sys.exit(f"load_device.py: compressed {k} did not come back")

        state_bytes = tensors * per * 4
        print(f"state: {state_bytes / 2**20:.0f} MiB in {tensors} tensors "
              f"on {torch.cuda.get_device_name(dev)}, {args.rounds} rounds")
        for m in modes:
            c, w = med[m]
            print(f"{m:<13} first {first[m]:.3f} s | cold {c:.3f} s "
                  f"({state_bytes / c / 1e9:.2f} GB/s) | warm {w:.3f} s "
                  f"({state_bytes / w / 1e9:.2f} GB/s)")
        print(f"ratio device transactional / streaming: {ratio:.3f} "
              f"(first {first['transactional'] / first['streaming']:.3f})")
        print(f"save from the device: raw {raw_s:.3f} s "
              f"{raw.info.bytes} bytes; zstd {packed_s:.3f} s "
              f"{packed.info.bytes} bytes "
              f"({packed.info.bytes / raw.info.bytes:.3f} of raw)")
        if args.json:
            print(json.dumps({
                "state_bytes": state_bytes, "rounds": args.rounds,
                "device": torch.cuda.get_device_name(dev),
                "modes": {m: {"first_s": first[m], "cold_s": med[m][0],
                              "warm_s": med[m][1]} for m in modes},
                "save": {"raw_s": raw_s, "raw_bytes": raw.info.bytes,
                         "zstd_s": packed_s,
                         "zstd_bytes": packed.info.bytes},
                "ratios": {"device_transactional_vs_streaming": ratio}}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
