#!/usr/bin/env python3
"""Tests `ckpt report` and `ckpt bench --html` in a real headless browser.

    PYTHONPATH=build/release/python scripts/test-report.py \
        --ckpt build/release/tools/ckpt/ckpt --out build/release/report-test

Pages, each opened in headless Chromium in a 1200x800 window, whose DOM
the page fills in once drawn (#ckpt-errors: any script error;
#ckpt-summary: every chart's datasets, their point counts and styles, each
axis's tick labels, the lineage edges drawn, each section's size):

  1. a root with full, incremental, asynchronous, tiered and deleted steps
     and metrics: no error, every chart drawn with as many points as the
     data has, and the lineage edges exactly those the manifests list
     (read here from the MANIFEST.json files, bytes from `ckpt show`);
     one rank, so no straggler named;
  2. a realistic root (13 MiB of state every 100 steps), a root of two
     steps (8 and 9) and, where this ckpt has MPI, a root of two ranks
     whose slowest rank the page names;
  3. a catalog of three jobs: one bar per job, one curve per job;
  4. `ckpt bench --html` of a tiny state: every figure and round drawn.

On every page: nothing cut off, every series of a chart told apart from
the others; on a root's: whole-number step ticks, byte, rate and duration
ticks in human units with none repeated, the stall drawn over the save.
Screenshots, 1200 wide, land in --out (realistic.png: the whole page).
It also prints (asserting nothing) the time to write the report of a long
root and to load it in the browser: 10,000 steps by default, every 500th
incremental (CKPT_REPORT_STEPS=N for another size). Stdlib only, and the
ckpt package (and mpirun, where this ckpt has MPI).
"""

import argparse
import array
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import ckpt

CHROMIUM = ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
            "--hide-scrollbars", "--virtual-time-budget=5000"]


def run(args, **kw):
    done = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=120, **kw)
    if done.returncode != 0:
        raise AssertionError(f"{args} failed ({done.returncode}):\n"
                             f"{done.stdout}\n{done.stderr}")
    return done.stdout


def open_page(path, screenshot, height=2600):
    """The page's summary, after Chromium ran it in a 1200x800 window (a
    common laptop's), its layout checked; and a screenshot 1200 wide."""
    url = "file://" + os.path.abspath(path)
    started = time.monotonic()
    dom = run(CHROMIUM + ["--window-size=1200,800", "--dump-dom", url])
    seconds = time.monotonic() - started
    run(CHROMIUM + [f"--window-size=1200,{height}",
                    f"--screenshot={screenshot}", url])
    assert os.path.getsize(screenshot) > 10_000, f"{screenshot} is empty"
    errors = re.search(r'<pre id="ckpt-errors"[^>]*>(.*?)</pre>', dom, re.S)
    assert errors is not None, f"{path}: no #ckpt-errors in the DOM"
    assert errors.group(1).strip() == "", \
        f"{path}: script errors:\n{errors.group(1)}"
    summary = re.search(r'<pre id="ckpt-summary"[^>]*>(.*?)</pre>', dom, re.S)
    assert summary is not None and summary.group(1).strip(), \
        f"{path}: the page wrote no summary (did its script run?)"
    text = (summary.group(1).replace("&quot;", '"').replace("&lt;", "<")
            .replace("&gt;", ">").replace("&amp;", "&"))
    parsed = json.loads(text)
    assert parsed["errors"] == 0, parsed
    check_layout(path, parsed)
    check_series(path, parsed)
    return parsed, seconds


def check_layout(path, summary):
    """Nothing cut off: every section holds its content, every chart fits
    its box and the window's height, and nothing is wider than the
    window."""
    inner, whole = summary["page_width"]
    assert whole <= inner, f"{path}: the page is {whole} px wide in {inner}"
    for s in summary["sections"]:
        assert s["scroll"][0] <= s["client"][0] and \
            s["scroll"][1] <= s["client"][1], f"{path}: clipped: {s}"
        for b in s["boxes"]:
            assert b["scroll"][0] <= b["client"][0] and \
                b["scroll"][1] <= b["client"][1], f"{path}: clipped: {b}"
            assert 150 < b["client"][1] <= 700, f"{path}: {b}"


def check_series(path, summary):
    """Every series of a chart can be told from the others: its own color,
    or else its own dash or point style."""
    for chart, c in summary["charts"].items():
        if c["type"] == "bar":
            continue
        looks = [(d["color"], tuple(d["dash"]), d["point"])
                 for d in c["datasets"]]
        assert len(set(looks)) == len(looks), f"{path}: {chart}: {looks}"
        colors = [d["color"] for d in c["datasets"]]
        assert len(set(colors)) == len(colors), f"{path}: {chart}: {colors}"


STEP_TICK = re.compile(r"-?\d{1,3}(,\d{3})*")
BYTES_TICK = re.compile(r"\d+(\.\d+)? (B|KiB|MiB|GiB|TiB)")
RATE_TICK = re.compile(r"\d+(\.\d+)? (B|KB|MB|GB|TB)/s")
MS_TICK = re.compile(r"\d+(\.\d+)? (ms|s|min|h)")


def check_axis(summary, chart, axis, pattern):
    """Every tick label of one axis matches `pattern` (human units, no
    exponent, few digits) and no two are alike."""
    labels = summary["charts"][chart]["axes"][axis]
    assert labels, (chart, axis)
    for label in labels:
        assert pattern.fullmatch(label), f"{chart} {axis}: {labels}"
        number = label.split(" ")[0].replace(",", "")
        digits = number.replace(".", "").lstrip("0")
        if "." not in number:
            digits = digits.rstrip("0")
        assert len(digits) <= 4, f"{chart} {axis}: {labels}"
    assert len(set(labels)) == len(labels), f"{chart} {axis}: {labels}"


def check_root_axes(summary):
    for chart in summary["charts"]:
        if chart != "ranks":  # every other chart of a root is by step
            check_axis(summary, chart, "x", STEP_TICK)
    check_axis(summary, "bytes", "y", BYTES_TICK)
    check_axis(summary, "throughput", "y", RATE_TICK)
    for chart in ("timeline", "durations", "stragglers"):
        check_axis(summary, chart, "y", MS_TICK)
    # A synchronous save's stall is its whole save: the stall line is
    # drawn dashed over the save line.
    durations = summary["charts"]["durations"]
    order = durations["drawn_order"]
    assert order.index("stall") > order.index("save"), order
    assert [d["dash"] for d in durations["datasets"]
            if d["label"] == "stall"] != [[]], durations


def section(summary, title):
    found = [s for s in summary["sections"] if s["title"] == title]
    assert len(found) == 1, [s["title"] for s in summary["sections"]]
    return found[0]


def counts(summary, chart):
    """{dataset label: points} of one chart, each drawn whole."""
    assert chart in summary["charts"], f"chart {chart} was not drawn"
    c = summary["charts"][chart]
    assert c["width"] > 0 and c["height"] > 0, c
    out = {}
    for d in c["datasets"]:
        assert d["drawn"] == d["points"], f"{chart}: {d}"
        out[d["label"]] = d["points"]
    return out


def manifest_edges(root):
    """(step, referenced step) of every committed checkpoint, read from the
    MANIFEST.json files themselves."""
    edges = set()
    for name in os.listdir(root):
        path = os.path.join(root, name, "MANIFEST.json")
        if not name.startswith("step-") or not os.path.exists(path):
            continue
        with open(path) as f:
            body = json.load(f)["manifest"]
        for dep in body["depends_on"]:
            edges.add((body["step"], dep))
    return edges


def shared_bytes(cli, root, step, dep):
    """Bytes of `dep`'s objects that `step` names (`ckpt show --json`)."""
    shown = json.loads(run([cli, "show", root, "--step", str(step), "--json"]))
    prefix = "step-%012d/" % dep
    return sum(o["size"] for o in shown["objects"]
               if o["key"].startswith(prefix))


def state_at(step):
    w = array.array("f", [0.0] * 8192)  # 8 chunks of 4 KiB
    for k in range(1, step + 1):        # each step changes one more chunk,
        w[1024 * (k % 8)] = float(k)    # so step 3 references 1 and 2
    return {"w": w, "note": f"step {step}"}


def root_case(cli, tmp, out):
    root = os.path.join(tmp, "run")
    local = os.path.join(tmp, "local")
    catalog = os.path.join(tmp, "catalog.sqlite")
    mgr = ckpt.CheckpointManager(root, create=True, chunk_size=4096,
                                 catalog=catalog, job_id="report-job")
    loss = lambda s: {"loss": 1.0 / s, "accuracy": s / 20.0}  # noqa: E731
    mgr.save(1, state_at(1), metrics=loss(1))                    # full
    mgr.save(2, state_at(2), metrics=loss(2), incremental=True)  # -> 1
    mgr.save(3, state_at(3), metrics=loss(3), incremental=True)  # -> 1, 2
    mgr.save_async(4, state_at(4), metrics=loss(4)).wait()       # async full
    mgr.save_async(5, state_at(5), metrics=loss(5),
                   incremental=True).wait()                      # -> 4
    mgr.save(6, state_at(6), metrics=loss(6))
    mgr.save(7, state_at(7), metrics=loss(7))
    mgr.delete(6)                                                # deleted
    with mgr.tiers(local, local_every=1, durable_every=2, replicas=0) as t:
        for step in (8, 9, 10):                                  # tiered
            t.save(step, state_at(step), metrics=loss(step))
    # The disk's own speed, for the throughput chart.
    disk = os.path.join(tmp, "disk.json")
    with open(disk, "w") as f:
        f.write(run([cli, "bench", "--size", "1MiB", "--tensors", "2",
                     "--runs", "1", "--dir", tmp, "--json"]))
    path = os.path.join(out, "root.html")
    started = time.monotonic()
    assert ckpt.report(root, path, catalog=catalog, bench=disk) == path
    print(f"root report: written in {time.monotonic() - started:.2f} s")
    summary, _ = open_page(path, os.path.join(out, "root.png"))

    listed = json.loads(run([cli, "ls", root, "--json"]))
    kept = [i["step"] for i in listed]
    assert 6 not in kept and {1, 2, 3, 4, 5, 7} <= set(kept), kept
    full = sum(1 for i in listed if not i["depends_on"])
    timeline = counts(summary, "timeline")
    assert timeline["full"] + timeline["incremental"] == len(kept), timeline
    assert timeline["full"] == full, (timeline, listed)
    assert timeline["deleted"] == 1, timeline  # step 6, from the catalog
    assert timeline["local tier"] >= 1, timeline
    timed = sum(1 for i in listed if i["timing"] is not None)
    assert timed == len(kept), listed  # every save recorded its timing
    assert counts(summary, "durations") == {
        "save": timed, "commit": timed, "stall": timed}
    assert any(i["timing"]["async"] for i in listed), listed
    # A save of under a millisecond has no throughput to draw.
    measured = sum(1 for i in listed if i["timing"]["save_ms"] > 0)
    assert counts(summary, "throughput") == {
        "save": measured, "disk raw write (ckpt bench)": 2}
    # One rank: its write and wait, and no straggler named.
    assert counts(summary, "stragglers") == {"write": timed, "wait": timed}
    assert "ranks" not in summary["charts"]
    assert section(summary, "Ranks")["notes"] == []
    check_root_axes(summary)
    assert counts(summary, "bytes")["written (incremental)"] == \
        len(kept) - full

    edges = manifest_edges(root)
    assert (3, 1) in edges and (3, 2) in edges and (5, 4) in edges, edges
    drawn = {tuple(e) for e in summary["edges_drawn"]}
    assert drawn == edges, f"drawn {sorted(drawn)} != manifests {sorted(edges)}"
    assert counts(summary, "lineage") == {
        "references (edges)": 3 * len(edges), "checkpoints": len(kept) +
        timeline["deleted"] + timeline["local tier"]}
    page = open(path).read()
    data = json.loads(re.search(
        r'<script type="application/json" id="ckpt-data">(.*?)</script>',
        page, re.S).group(1))
    for step, dep, nbytes in data["edges"]:
        assert nbytes == shared_bytes(cli, root, step, dep) > 0, \
            (step, dep, nbytes)
    metrics = {}
    for chart in summary["charts"]:
        if chart.startswith("metric-"):
            metrics.update(counts(summary, chart))
    with_loss = sum(1 for i in listed if "loss" in i["metrics"])
    assert metrics == {"loss": with_loss, "accuracy": with_loss}, metrics
    return root


def realistic_case(cli, tmp, out):
    """A root as a job makes it: 13 MiB of state saved every 100 steps, a
    full save then three incremental ones, every third asynchronous, a
    falling loss. Its screenshot, 1200 wide, is the one to look at."""
    root = os.path.join(tmp, "realistic")
    mgr = ckpt.CheckpointManager(root, create=True, chunk_size=1 << 20)
    w = array.array("f", [0.0] * (3 << 20))
    b = array.array("f", [0.0] * (1 << 18))
    for k, step in enumerate(range(100, 1700, 100)):
        w[(k * 300000) % len(w)] = step
        save = mgr.save_async if k % 3 == 2 else mgr.save
        done = save(step, {"w": w, "b": b}, metrics={"loss": 2.0 / (k + 1)},
                    incremental=k % 4 != 0)
        if k % 3 == 2:
            done.wait()
    path = os.path.join(out, "realistic.html")
    run([cli, "report", root, "-o", path])
    summary, _ = open_page(path, os.path.join(out, "realistic.png"), 4000)
    check_root_axes(summary)
    assert counts(summary, "bytes")["written (full)"] == 4
    assert "ranks" not in summary["charts"]


def two_steps_case(cli, tmp, out):
    """Two saves of one size, steps 8 and 9: a step axis this short once
    had a tick at 8.5, and a byte axis of equal values one label
    repeated."""
    root = os.path.join(tmp, "two-steps")
    mgr = ckpt.CheckpointManager(root, create=True)
    for step in (8, 9):
        mgr.save(step, {"w": array.array("f", [float(step)] * 1000)})
    path = os.path.join(out, "two-steps.html")
    run([cli, "report", root, "-o", path])
    summary, _ = open_page(path, os.path.join(out, "two-steps.png"))
    check_root_axes(summary)


MPI_JOB = """
import array, sys, ckpt
comm = ckpt.mpi_communicator()
mgr = ckpt.CheckpointManager(sys.argv[1], create=True, communicator=comm,
                             chunk_size=4096)
for step in (1, 2, 3):
    w = array.array("f", [float(step + comm.rank)] * 4096)
    mgr.save(step, {"w": ckpt.Shard(w, [comm.rank * 4096],
                                    [comm.size * 4096])})
"""


def ranks_case(cli, tmp, out):
    """A root of two ranks (under mpirun, where this ckpt has MPI): the
    slowest and fastest writes, and the slowest rank named."""
    mpirun = shutil.which("mpirun")
    if not ckpt.HAS_MPI or mpirun is None:
        print("two-rank report: skipped (no MPI)")
        return
    root = os.path.join(tmp, "ranks")
    job = os.path.join(tmp, "ranks_job.py")
    with open(job, "w") as f:
        f.write(MPI_JOB)
    run([mpirun, "--allow-run-as-root", "--oversubscribe", "--mca", "btl",
         "self,vader", "--mca", "plm_rsh_agent", "false", "-np", "2",
         sys.executable, job, root])
    path = os.path.join(out, "ranks.html")
    run([cli, "report", root, "-o", path])
    summary, _ = open_page(path, os.path.join(out, "ranks.png"))
    check_root_axes(summary)
    assert counts(summary, "stragglers") == {
        "slowest write": 3, "fastest write": 3, "longest wait": 3}
    assert counts(summary, "ranks") == {"write": 2, "wait": 2}
    notes = section(summary, "Ranks: stragglers")["notes"]
    assert len(notes) == 1 and re.fullmatch(
        r"Step 3 \(2 ranks\): rank [01] wrote slowest\.", notes[0]), notes
    print("two-rank report: ok")


def catalog_case(cli, tmp, out):
    catalog = os.path.join(tmp, "jobs.sqlite")
    saves = {"job-a": 3, "job-b": 4, "job-c": 2}
    for k, (job, n) in enumerate(saves.items()):
        mgr = ckpt.CheckpointManager(os.path.join(tmp, job), create=True,
                                     catalog=catalog, job_id=job)
        for step in range(1, n + 1):
            mgr.save(step * 10, state_at(step),
                     metrics={"loss": 1.0 / step + k / 4})
    path = os.path.join(out, "catalog.html")
    run([cli, "report", "--catalog", catalog, "-o", path])
    summary, _ = open_page(path, os.path.join(out, "catalog.png"))
    check_axis(summary, "curve-0", "x", STEP_TICK)
    assert counts(summary, "jobs") == {"committed checkpoints": 3,
                                       "deleted checkpoints": 3}
    assert counts(summary, "curve-0") == saves
    page = open(path).read()
    for job, n in saves.items():
        assert f'"job_id":"{job}"' in page
        newest = re.search(r'"job_id":"%s","newest":\{[^}]*"step":(\d+)' % job,
                           page)
        assert newest and int(newest.group(1)) == n * 10, job


def bench_case(cli, tmp, out):
    path = os.path.join(out, "bench.html")
    # What bench/peers/peers.py --json prints (its run needs NumPy, PyTorch
    # and h5py; the page only reads these fields).
    peers = os.path.join(tmp, "peers.json")
    with open(peers, "w") as f:
        json.dump({"state_bytes": 1 << 20, "tensors": 2, "runs": 2,
                   "gbps": {"ckpt": 0.9, "torch.save": 0.3, "h5py": 0.5,
                            "numpy.save": 0.8}}, f)
    report = json.loads(run([cli, "bench", "--size", "1MiB", "--tensors", "2",
                             "--runs", "2", "--dir", tmp, "--json",
                             "--html", path, "--peers", peers]))
    summary, _ = open_page(path, os.path.join(out, "bench.png"))
    medians = counts(summary, "medians")
    order = ["raw_write_buffered_gbps", "raw_write_direct_gbps", "save_gbps",
             "raw_read_cold_gbps", "raw_read_direct_gbps", "load_cold_gbps",
             "load_streaming_cold_gbps", "raw_read_warm_gbps", "load_warm_gbps", "memcpy_gbps",
             "parallel_memcpy_gbps"]
    assert medians == {"median": 4 + sum(
        1 for k in order if k in report["figures"])}, medians
    rounds = counts(summary, "rounds")
    assert {"save", "load_cold", "memcpy", "raw_write_direct"} <= set(rounds)
    assert set(rounds.values()) == {2}, rounds
    for chart, axis in (("medians", "x"), ("rounds", "y")):
        labels = [t for t in summary["charts"][chart]["axes"][axis] if t]
        for label in labels:
            assert RATE_TICK.fullmatch(label), (chart, labels)
        assert len(set(labels)) == len(labels), (chart, labels)


def long_root(cli, tmp, out, steps):
    root = "/dev/shm" if os.path.isdir("/dev/shm") else tmp
    with tempfile.TemporaryDirectory(prefix="ckpt-report-long-",
                                     dir=root) as root:
        mgr = ckpt.CheckpointManager(root, create=True, chunk_size=4096,
                                     gc_after_save=False)
        state = {"w": array.array("f", [0.0] * 2048)}
        started = time.monotonic()
        for step in range(steps):
            if step % 500 == 1:
                state["w"][0] = step
            mgr.save(step, state, metrics={"loss": 1.0 / (step + 1)},
                     incremental=step % 500 == 1)
        saved = time.monotonic() - started
        path = os.path.join(out, "long.html")
        started = time.monotonic()
        run([cli, "report", root, "-o", path])
        written = time.monotonic() - started
        summary, loaded = open_page(path, os.path.join(out, "long.png"))
        counts(summary, "timeline")
        print(f"long root: {steps} steps saved in {saved:.1f} s; report "
              f"({os.path.getsize(path) / 1e6:.1f} MB) written in "
              f"{written:.2f} s; the page loaded and drew its charts in "
              f"{summary['page_ms'] / 1000:.2f} s (the whole Chromium run, "
              f"its start included: {loaded:.2f} s)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", required=True, help="the ckpt tool")
    parser.add_argument("--out", required=True,
                        help="where pages and screenshots go")
    args = parser.parse_args()
    if shutil.which("chromium") is None:
        sys.exit("test-report: chromium is missing (scripts/install-deps.sh)")
    os.makedirs(args.out, exist_ok=True)
    steps = int(os.environ.get("CKPT_REPORT_STEPS", "10000"))
    with tempfile.TemporaryDirectory(prefix="ckpt-report-") as tmp:
        root_case(args.ckpt, tmp, args.out)
        print("root report: ok")
        realistic_case(args.ckpt, tmp, args.out)
        print("realistic root report: ok")
        two_steps_case(args.ckpt, tmp, args.out)
        print("two-step root report: ok")
        ranks_case(args.ckpt, tmp, args.out)
        catalog_case(args.ckpt, tmp, args.out)
        print("catalog report: ok")
        bench_case(args.ckpt, tmp, args.out)
        print("bench report: ok")
        long_root(args.ckpt, tmp, args.out, steps)
    print(f"test-report: ok (pages and screenshots in {args.out})")


if __name__ == "__main__":
    main()
