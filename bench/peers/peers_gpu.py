#!/usr/bin/env python3
"""ckpt beside torch.save, DCP and safetensors, on the same CUDA state.

    PYTHONPATH=build/release/python .venv/bin/python bench/peers/peers_gpu.py \
        [--device cuda:0] [--size-mib 2048] [--tensors 64] [--runs 5] \
        [--dir DIR] [--json]

The state is --tensors float32 tensors of --size-mib MiB in all, made with
PyTorch on --device. Each library saves it from the device, each where it
is installed: torch.save, torch.distributed.checkpoint's save and async_save
(one process, no process group), safetensors' save_file (which copies each
tensor to the host itself), and ckpt's save, save_async and save_async with
stage_in_background (its wait_staged() is the caller's wait). Every file is
made durable as ckpt makes its own (fsync of the file and its directory;
DCP's writer fsyncs its files). One untimed save of each first (the CUDA
context, pinned staging, thread pools), then rounds that rotate the order as
bench/peers/peers.py does.

Printed per saver: the median seconds the caller was blocked (the call; for
ckpt with stage_in_background, until wait_staged() returned) and until the
save was durable, and GB/s of the latter. Without a CUDA device in PyTorch it
prints "skipped: <why>" and exits 0.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402 - beside this file
from peers import durable, run_rounds  # noqa: E402


def cuda_missing(device):
    """Why PyTorch cannot run on `device`, or None."""
    try:
        import torch
    except ImportError as e:
        return f"PyTorch is not installed ({e})"
    if torch.version.cuda is None:
        return (f"PyTorch {torch.__version__} is built without CUDA "
                f"(torch.version.cuda is None)")
    if not torch.cuda.is_available():
        return (f"PyTorch {torch.__version__} (CUDA {torch.version.cuda}) "
                f"sees no CUDA device")
    index = torch.device(device).index or 0
    if index >= torch.cuda.device_count():
        return (f"{device}: PyTorch sees {torch.cuda.device_count()} CUDA "
                f"devices")
    return None


def save_torch(state, path):
    import torch
    torch.save(state, path)
    durable(path)


def dcp_module():
    import torch.distributed as dist
    if not dist.is_available():
        raise ImportError("torch.distributed is not available")
    import torch.distributed.checkpoint as dcp
    return dcp


def save_dcp(state, path):
    dcp = dcp_module()
    writer = dcp.FileSystemWriter(path)
    if hasattr(dcp, "save"):
        dcp.save(state, storage_writer=writer)
    else:  # before PyTorch 2.2
        dcp.save_state_dict(state, storage_writer=writer, no_dist=True)


def async_save_dcp(state, path):
    # Returns once the state is staged in host memory; the future ends when
    # the files are written.
    dcp = dcp_module()
    future = dcp.async_save(state, storage_writer=dcp.FileSystemWriter(path))
    return future.result


def save_safetensors(state, path):
    from safetensors.torch import save_file
    save_file(state, path)
    durable(path)


class CkptSaver(peers.CkptSaver):
    """peers.py's ckpt saver, with a `mode`: "save", "async" or
    "background" (save_async with stage_in_background)."""

    def __init__(self, root, mode):
        super().__init__(root)
        self.mode = mode

    def __call__(self, state, path):
        if self.mode == "save":
            return super().__call__(state, path)
        self.step += 1
        handle = self.mgr.save_async(
            self.step, state, stage_in_background=self.mode == "background")
        if self.mode == "background":
            # The caller waits for the copy before its next optimizer step:
            # that wait is part of the stall.
            handle.wait_staged()
        return handle.wait


def make_savers(base):
    """{name: saver} of the libraries that are installed, and {name: why}
    of those that are not."""
    savers, missing = {}, {}

    def add(name, factory):
        try:
            savers[name] = factory()
        except ImportError as e:
            missing[name] = str(e)

    def need(module, saver):
        def factory():
            __import__(module)
            return saver
        return factory

    def dcp(saver, api, since):
        def factory():
            if not hasattr(dcp_module(), api):
                raise ImportError(f"torch.distributed.checkpoint has no "
                                  f"{api} (PyTorch {since}+)")
            return saver
        return factory

    add("ckpt.save",
        lambda: CkptSaver(os.path.join(base, "ckpt-save"), "save"))
    add("ckpt.save_async",
        lambda: CkptSaver(os.path.join(base, "ckpt-async"), "async"))
    add("ckpt.save_async(bg)",
        lambda: CkptSaver(os.path.join(base, "ckpt-bg"), "background"))
    add("torch.save", need("torch", save_torch))
    add("dcp.save", dcp(save_dcp, "FileSystemWriter", "2.0"))
    add("dcp.async_save", dcp(async_save_dcp, "async_save", "2.3"))
    add("safetensors", need("safetensors.torch", save_safetensors))
    return savers, missing


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--size-mib", type=int, default=2048)
    p.add_argument("--tensors", type=int, default=64)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--dir", default="")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()

    why = cuda_missing(a.device)
    if why is not None:
        print(json.dumps({"skipped": why}) if a.json else f"skipped: {why}")
        return

    import torch
    n = a.size_mib * (1 << 20) // 4 // a.tensors
    state = {
        f"layer{t:03d}.weight":
            torch.arange(n, dtype=torch.float32, device=a.device) *
            ((t + 1) * 1e-3)
        for t in range(a.tensors)
    }
    torch.cuda.synchronize(a.device)
    nbytes = sum(v.numel() * v.element_size() for v in state.values())

    def settle():
        torch.cuda.synchronize(a.device)

    base = a.dir or tempfile.mkdtemp(prefix="ckpt-peers-gpu-", dir="/var/tmp")
    os.makedirs(base, exist_ok=True)
    failed = {}
    try:
        savers, missing = make_savers(base)
        for s in list(savers):
            try:
                run_rounds(savers, [s], state, 1, base, settle)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                failed[s] = f"{type(e).__name__}: {e}"
                del savers[s]
        names = list(savers)
        rounds = run_rounds(savers, names, state, a.runs, base, settle)
    finally:
        if not a.dir:
            shutil.rmtree(base, ignore_errors=True)

    blocked = {s: statistics.median(b for b, _ in v) for s, v in rounds.items()}
    finished = {s: statistics.median(f for _, f in v)
                for s, v in rounds.items()}
    out = {
        "device": a.device, "gpu": torch.cuda.get_device_name(a.device),
        "torch": torch.__version__, "state_bytes": nbytes,
        "tensors": a.tensors, "runs": a.runs,
        "blocked_seconds": blocked, "finished_seconds": finished,
        "finished_gbps": {s: nbytes / v / 1e9 for s, v in finished.items()},
        "missing": missing, "failed": failed,
    }
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"peers_gpu: {nbytes / 2**30:.2f} GiB in {a.tensors} float32 "
          f"tensors on {a.device} ({out['gpu']}), {a.runs} rounds (medians), "
          f"fsync included")
    print(f"  {'saver':<20} {'blocked s':>10} {'finished s':>11} {'GB/s':>7}")
    for s in names:
        print(f"  {s:<20} {blocked[s]:10.3f} {finished[s]:11.3f}"
              f" {out['finished_gbps'][s]:7.3f}")
    for s, why in {**missing, **failed}.items():
        print(f"  {s:<20} {'not installed' if s in missing else 'failed'}: "
              f"{why}")


if __name__ == "__main__":
    main()
