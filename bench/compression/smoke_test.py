"""bench_compression on a small trained model, one run: every ratio the
benchmark promises is printed, positive and finite, and the compressed
bytes are fewer than the raw ones (ctest bench_compression_smoke; the
figures themselves are docs/benchmarks.md's, from full runs)."""

import json
import math
import subprocess
import sys

WANTED = ["size_vs_zipnn", "compress_gbps_vs_zipnn", "decompress_gbps_vs_zipnn",
          "size_vs_dcp_zstd", "compress_gbps_vs_dcp_zstd",
          "decompress_gbps_vs_dcp_zstd", "size_vs_dcp_zstd_bf16",
          "save_time_vs_dcp_zstd_f32", "load_time_vs_dcp_zstd_f32",
          "save_time_vs_raw_slow_storage", "save_time_vs_raw_fast_storage"]


def main():
    bench = sys.argv[1]
    run = subprocess.run([bench, "--small", "--runs", "1", "--json"],
                         capture_output=True, text=True, timeout=540)
    if run.returncode != 0:
        sys.exit(f"bench_compression failed ({run.returncode}):\n{run.stderr}")
    out = json.loads(run.stdout)
    ratios = out["ratios"]
    missing = [k for k in WANTED if k not in ratios]
    if missing:
        sys.exit(f"bench_compression printed no {', '.join(missing)}")
    bad = {k: v for k, v in ratios.items()
           if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0)}
    if bad:
        sys.exit(f"ratios not positive and finite: {bad}")
    for group in ("f32", "bf16"):
        figures = out["ckpt"][group]
        if not figures["stored_bytes"] < figures["raw_bytes"]:
            sys.exit(f"{group}: compression stored {figures['stored_bytes']} "
                     f"of {figures['raw_bytes']} bytes")
    print(json.dumps(ratios, indent=1))


if __name__ == "__main__":
    main()
