#!/usr/bin/env python3
"""The peers of ckpt's lossless compression, measured on the same tensors.

    .venv/bin/python bench/compression/peers.py --weights FILE.safetensors \\
        --threads T [--dir DIR] [--runs 3] [--json]

bench_compression makes FILE once with bench/compression/weights.py (trained
weights and Adam moments, float32 and bfloat16), runs ckpt's codec (byte
planes of the element, one zstd level 1 frame per 4 MiB chunk, raw where a
chunk does not shrink) on those tensors, and runs this script for the peers'
side, so that both sides report ratio and speed on identical bytes.

For each group, f32 and bf16 (the tensors whose names start with it):

  zipnn     ZipNN on each tensor's raw bytes (input_format "byte", the
            group's dtype, threads=T, its defaults otherwise): compress every
            tensor, then decompress every blob, each pass timed in total; the
            bytes must come back exact (checked outside the timing).
  dcp_zstd  PyTorch's distributed checkpoint (one process, no process group)
            saved with its ZStandard stream extension and, for reference,
            without it; bytes on disk, save seconds, and load seconds into
            preallocated tensors, which must equal the originals bit for bit.

Each time is the best of --runs. A peer whose import fails is reported as
{"available": false, "why": ...} rather than ending the run. With --json the
output is one JSON object {"threads", "groups": {"f32": {"zipnn", "dcp_zstd"},
"bf16": {...}}}, in bytes and seconds; without it, a table.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import warnings

import torch
from safetensors.torch import load_file

GROUPS = {"f32": ("float32", torch.int32), "bf16": ("bfloat16", torch.int16)}


def raw_bytes_of(t):
    # The tensor's memory as it is, the bytes ckpt's codec sees for it.
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def measure_zipnn(tensors, dtype_name, threads, runs):
    try:
        from zipnn import ZipNN
    except Exception as exc:  # ImportError, or a broken native module
        return {"available": False, "why": f"import zipnn: {exc!r}"}
    # method defaults to "AUTO": zipnn_core groups the bytes of each element
    # (the sign bit moved next to the mantissa, byte planes per 256 KiB
    # chunk) and Huffman-codes each plane (zstd's HUF_compress), keeping a
    # plane raw where it would not shrink below compression_threshold 0.95.
    # zstd itself is only used with method="zstd", so it is not in play here.
    z = ZipNN(input_format="byte", bytearray_dtype=dtype_name,
              threads=threads)
    blobs = [raw_bytes_of(t) for t in tensors]
    raw = sum(len(b) for b in blobs)
    best_c = best_d = float("inf")
    stored = 0
    for _ in range(runs):
        # zipnn_core reorders bits in its input buffer in place: given
        # immutable bytes it returns blobs that do not decompress to the
        # input (seen with zipnn 0.5.4), given a bytearray it round-trips
        # but leaves that buffer scrambled. So each run gets fresh writable
        # copies, made outside the timing.
        inputs = [bytearray(b) for b in blobs]
        start = time.perf_counter()
        packed = [z.compress(b) for b in inputs]
        best_c = min(best_c, time.perf_counter() - start)
        start = time.perf_counter()
        unpacked = [z.decompress(p) for p in packed]
        best_d = min(best_d, time.perf_counter() - start)
        for i, (orig, back) in enumerate(zip(blobs, unpacked)):
            if bytes(back) != orig:
                raise SystemExit(f"peers.py: zipnn did not return tensor {i} "
                                 f"of {dtype_name} exactly")
        stored = sum(len(p) for p in packed)
        del inputs, packed, unpacked
    return {"available": True, "method": "AUTO (byte grouping + Huffman)",
            "threads": threads, "raw_bytes": float(raw),
            "compressed_bytes": float(stored),
            "ratio": raw / stored,
            "compress_seconds": best_c, "decompress_seconds": best_d,
            "compress_gbps": raw / best_c / 1e9,
            "decompress_gbps": raw / best_d / 1e9}


def folder_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def dcp_round(dcp, state, path, extensions, runs, int_dtype):
    from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
    best_s = best_l = float("inf")
    stored = 0
    for _ in range(runs):
        # A fresh folder each run, so the bytes counted are this save's only.
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        # sync_files=False: no fsync, as ckpt's side is timed without one;
        # every byte is still written through to the page cache.
        writer = FileSystemWriter(path, sync_files=False,
                                  _extensions=extensions)
        start = time.perf_counter()
        dcp.save(state, storage_writer=writer, no_dist=True)
        best_s = min(best_s, time.perf_counter() - start)
        stored = folder_bytes(path)
        into = {k: torch.empty_like(v) for k, v in state.items()}
        start = time.perf_counter()
        # The reader finds the zstd stream from the checkpoint's metadata.
        dcp.load(into, storage_reader=FileSystemReader(path), no_dist=True)
        best_l = min(best_l, time.perf_counter() - start)
        for k, v in state.items():
            # Compared as integers, so that -0.0 and 0.0 (or NaN payloads)
            # would count as different: lossless means bit for bit.
            if not torch.equal(into[k].view(int_dtype), v.view(int_dtype)):
                raise SystemExit(f"peers.py: dcp did not load {k} exactly")
        del into
    return stored, best_s, best_l


def measure_dcp(tensors, names, int_dtype, runs, workdir):
    try:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint._extension import ZStandard
        if not ZStandard.is_available():
            return {"available": False,
                    "why": "ZStandard: neither zstandard nor pyzstd imports"}
    except Exception as exc:
        return {"available": False, "why": f"import dcp: {exc!r}"}
    # One process without a process group is the intended use here (no_dist
    # below); DCP warns about it on every call regardless.
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    state = dict(zip(names, tensors))
    raw = sum(t.numel() * t.element_size() for t in tensors)
    z_bytes, z_save, z_load = dcp_round(
        dcp, state, os.path.join(workdir, "zstd"), [ZStandard()], runs,
        int_dtype)
    r_bytes, r_save, r_load = dcp_round(
        dcp, state, os.path.join(workdir, "raw"), None, runs, int_dtype)
    shutil.rmtree(workdir, ignore_errors=True)
    # DCP's ZStandard builds zstandard.ZstdCompressor() with no arguments:
    # level 3, single-threaded; its FileSystemWriter writes with one thread.
    return {"available": True, "threads": "dcp default",
            "level": "zstandard default (3)", "raw_bytes": float(raw),
            "stored_bytes": float(z_bytes), "ratio": raw / z_bytes,
            "save_seconds": z_save, "load_seconds": z_load,
            "save_gbps": raw / z_save / 1e9, "load_gbps": raw / z_load / 1e9,
            "stored_bytes_raw": float(r_bytes), "save_seconds_raw": r_save,
            "load_seconds_raw": r_load}


def table(result):
    lines = [f"threads {result['threads']}"]
    for group, peers in result["groups"].items():
        for peer, r in peers.items():
            if not r.get("available"):
                lines.append(f"{group:5} {peer:9} unavailable: {r['why']}")
                continue
            if peer == "zipnn":
                lines.append(
                    f"{group:5} {peer:9} raw {r['raw_bytes'] / 1e6:8.1f} MB "
                    f"stored {r['compressed_bytes'] / 1e6:8.1f} MB "
                    f"ratio {r['ratio']:.3f}  compress "
                    f"{r['compress_gbps']:.3f} GB/s  decompress "
                    f"{r['decompress_gbps']:.3f} GB/s")
            else:
                lines.append(
                    f"{group:5} {peer:9} raw {r['raw_bytes'] / 1e6:8.1f} MB "
                    f"stored {r['stored_bytes'] / 1e6:8.1f} MB "
                    f"ratio {r['ratio']:.3f}  save {r['save_seconds']:.3f} s "
                    f"load {r['load_seconds']:.3f} s  (uncompressed: "
                    f"{r['stored_bytes_raw'] / 1e6:.1f} MB, save "
                    f"{r['save_seconds_raw']:.3f} s, load "
                    f"{r['load_seconds_raw']:.3f} s)")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--dir", default=None,
                    help="where DCP's checkpoints go (default: a temporary "
                         "folder under /var/tmp)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.threads < 1 or args.runs < 1:
        sys.exit("peers.py: --threads and --runs must be at least 1")
    torch.set_num_threads(args.threads)

    loaded = load_file(args.weights)
    result = {"threads": args.threads, "groups": {}}
    with tempfile.TemporaryDirectory(dir=args.dir or "/var/tmp",
                                     prefix="ckpt-peers-") as work:
        for group, (dtype_name, int_dtype) in GROUPS.items():
            names = sorted(k for k in loaded if k.startswith(group + "/"))
            if not names:
                sys.exit(f"peers.py: no tensors under {group}/ in "
                         f"{args.weights}")
            tensors = [loaded[k].contiguous() for k in names]
            result["groups"][group] = {
                "zipnn": measure_zipnn(tensors, dtype_name, args.threads,
                                       args.runs),
                "dcp_zstd": measure_dcp(tensors, names, int_dtype, args.runs,
                                        os.path.join(work, group)),
            }
    print(json.dumps(result) if args.json else table(result))


if __name__ == "__main__":
    main()
