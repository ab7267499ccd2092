"""The README's two training loops survive a damaged newest checkpoint.

    readme_loops_test.py --readme README.md --cpp-loop BUILD/examples/readme_loop
                         --ckpt BUILD/tools/ckpt/ckpt

The Python loop ("PyTorch in ten lines", cut out of the README here) and
the C++ one (the same section's block, built as readme_loop by
examples/CMakeLists.txt) each run to the end, saying that they started
fresh in a root named as new, and once more, saying that they resumed
from step 10; then one byte of the newest
step's data is flipped and each runs again: it resumes from the step
before (skipping the damaged one with a warning), trains to the end, and
its save of the damaged step's number replaces it (with a warning), so
that `ckpt verify ROOT` passes and the step loads whole. Before the
replace, that save failed with AlreadyExists on every restart. Run by
ctest (python/CMakeLists.txt) with PYTHONPATH at the build's package.
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np

import ckpt

EPOCHS = 10  # both loops train to epoch 10, saving step e after epoch e


def block(readme, heading, lang):
    """The first ```lang block after the heading `## heading`."""
    lines = open(readme, encoding="utf-8").read().split("\n")
    at = lines.index(f"## {heading}")
    start = lines.index(f"```{lang}", at) + 1
    return "\n".join(lines[start:lines.index("```", start)]) + "\n"


def run(what, cmd, cwd):
    """(stdout, stderr) of a run that must exit 0."""
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                       timeout=120)
    if p.returncode != 0:
        sys.exit(f"FAIL {what}: exited {p.returncode}\n{p.stdout}{p.stderr}")
    return p.stdout, p.stderr


def flip_newest(root):
    """Flips the last byte (tensor data) of the newest step's data objects;
    that step's number."""
    newest = max(glob.glob(os.path.join(root, "step-*")))
    objects = glob.glob(os.path.join(newest, "*.safetensors"))
    assert objects, f"no data object in {newest}"
    for path in objects:
        with open(path, "r+b") as f:
            f.seek(-1, os.SEEK_END)
            byte = f.read(1)[0]
            f.seek(-1, os.SEEK_END)
            f.write(bytes([byte ^ 0x5A]))
    return int(os.path.basename(newest)[len("step-"):])


def expect(what, condition, detail):
    if not condition:
        sys.exit(f"FAIL {what}: {detail}")


def check_loop(name, cmd, cwd, ckpt_tool, check_state):
    root = os.path.join(cwd, "run42")  # the README's root
    out, err = run(f"{name}: the first run", cmd, cwd)
    # It says what it did: a fresh start, in a root it names as new.
    expect(f"{name}: the first run", out == "started fresh\n", repr(out))
    expect(f"{name}: the first run", "created a new, empty root" in err and
           "run42" in err, f"no line naming the new root:\n{err}")
    out, err = run(f"{name}: a run after the end", cmd, cwd)
    expect(f"{name}: a run after the end",
           out == f"resumed from step {EPOCHS}\n", repr(out))
    expect(f"{name}: a run after the end", "created" not in err, err)
    step = flip_newest(root)
    expect(name, step == EPOCHS, f"the newest step is {step}")
    out, err = run(f"{name}: the run after the damage", cmd, cwd)
    expect(f"{name}: the resume", out == f"resumed from step {step - 1}\n",
           repr(out))
    expect(f"{name}: the resume", f"step {step}, which does not load whole"
           in err, f"no warning that step {step} was skipped:\n{err}")
    expect(f"{name}: the save", f"step {step} was damaged" in err and
           "this save replaced it" in err,
           f"no warning that the save replaced step {step}:\n{err}")
    run(f"{name}: ckpt verify", [ckpt_tool, "verify", root], cwd)
    mgr = ckpt.open(root)
    expect(name, mgr.latest() == step, f"the newest step is {mgr.latest()}")
    check_state(mgr.load(step))
    mgr.close()
    print(f"ok {name}: resumed from step {step - 1}, replaced step {step}")


def check_cpp_state(state):
    weights = np.full(1 << 20, 0.5, dtype=np.float32)
    for _ in range(EPOCHS):
        weights *= np.float32(0.99)
    expect("c++: step 10", int(state["epoch"]) == EPOCHS, state["epoch"])
    expect("c++: step 10", np.array_equal(state["model"]["weights"], weights),
           "the weights are not those of 10 epochs")


def check_python_state(state):
    expect("python: step 10", state["epoch"] == EPOCHS, state["epoch"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--readme", required=True)
    parser.add_argument("--cpp-loop", required=True)
    parser.add_argument("--ckpt", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ckpt-readme-loops-") as work:
        cpp = os.path.join(work, "cpp")
        os.mkdir(cpp)
        check_loop("c++", [os.path.abspath(args.cpp_loop)], cpp, args.ckpt,
                   check_cpp_state)
        py = os.path.join(work, "python")
        os.mkdir(py)
        with open(os.path.join(py, "loop.py"), "w", encoding="utf-8") as f:
            f.write(block(args.readme, "PyTorch in ten lines", "python"))
        check_loop("python", [sys.executable, "loop.py"], py, args.ckpt,
                   check_python_state)


if __name__ == "__main__":
    main()
