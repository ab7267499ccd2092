#!/usr/bin/python3
"""Runs the code blocks of the documentation and checks its links.

    scripts/check-docs.py [--build build/release] [FILE.md ...]

Without FILEs it checks README.md and docs/*.md. Every fenced code block
names its language in its info string, and the language decides what is
done with it (docs/README.md, "Code blocks", is the reference):

  sh, bash, shell, console   run with bash in a scratch directory; a block
                             with `$ ` lines is a transcript whose shown
                             output is compared with what the commands print
  python                     run as a script with the project's virtual
                             environment's Python (.venv/bin/python)
  c, cpp                     compiled against include/ and the build's
                             libraries, then run
  text, json, ...            not a program: never run

A program block that cannot run here says why in its info string:
```sh not-run: needs a GPU``` (`# not run: REASON` is read the same way).

Every block runs in a fresh scratch directory that holds symbolic links to
the repository's top-level files and folders (so `build/release/...`,
`examples/...` resolve) with the build's `ckpt` command and benchmark tools
and then the project's .venv/bin on PATH, PYTHONPATH=BUILD/python and XDG_STATE_HOME in the scratch directory
(the `ckpt` tool's default catalog lands there); a block that runs torchrun
gets TMPDIR there too (its agents' folders go with it). Every relative link of a
checked file must name a file of the repository, and a `#fragment` a
heading of it.

Prints, per file, the blocks run and not run (with the reasons), and exits
1 if any block fails, any block breaks a rule, or any link is broken.
"""

import argparse
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

SHELL = {"sh", "bash", "shell", "console"}
PYTHON = {"python", "py"}
C = {"c"}
CPP = {"cpp", "c++", "cc"}
PROGRAMS = SHELL | PYTHON | C | CPP
NOT_PROGRAMS = {"text", "json", "yaml", "toml", "ini", "diff", "sql"}

NOT_RUN = re.compile(r"(?:#\s*)?not[- ]run:\s*(.*)$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
EXIT_LINE = re.compile(r"^\[exit (\d+)\]$")
BLOCK_TIMEOUT_S = 300


class Block:
    def __init__(self, path, line, info, body):
        self.path, self.line, self.info, self.body = path, line, info, body
        words = info.split(None, 1)
        self.lang = words[0].lower() if words else ""
        rest = words[1] if len(words) > 1 else ""
        m = NOT_RUN.search(rest)
        self.not_run = m.group(1).strip() if m else None
        self.marked_not_run = m is not None

    def where(self):
        return f"{self.path}:{self.line}"


def blocks_of(path):
    """Yields the fenced code blocks of a Markdown file, unindented."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m and m.group(2)[0] == "`" and "`" in m.group(3):
            m = None  # inline code such as ```` ```sh ````, not a fence
        if not m:
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3).strip()
        j = i + 1
        while j < len(lines) and not re.match(
                r"^\s*" + re.escape(fence[0]) + "{%d,}\\s*$" % len(fence),
                lines[j]):
            j += 1
        body = [l[len(indent):] if l.startswith(indent) else l.lstrip()
                for l in lines[i + 1:j]]
        yield Block(path, i + 1, info, body)
        i = j + 1


# --- output comparison -------------------------------------------------

def normalize(line):
    """Trailing blanks dropped, runs of blanks (table padding) made one."""
    return re.sub(r"[ \t]+", " ", line.rstrip())


def line_matches(expected, actual):
    parts = [re.escape(p) for p in normalize(expected).split("...")]
    return re.fullmatch(".*".join(parts), normalize(actual)) is not None


def output_matches(expected, actual):
    """A line `...` matches any lines (none included); `...` inside a line
    matches any characters of that line."""
    memo = {}

    def match(i, j):
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(expected):
            r = j == len(actual)
        elif expected[i].strip() == "...":
            r = any(match(i + 1, k) for k in range(j, len(actual) + 1))
        else:
            r = j < len(actual) and line_matches(expected[i], actual[j]) \
                and match(i + 1, j + 1)
        memo[(i, j)] = r
        return r

    return match(0, 0)


def trim(lines):
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


# --- running -----------------------------------------------------------

class Env:
    def __init__(self, repo, build):
        self.repo, self.build = repo, os.path.join(repo, build)
        self.build_rel = build
        self._cxx_libs = None
        # The project's virtual environment (scripts/install-deps.sh), where
        # the tests' packages are; Debian's python3 has none of them.
        self.python = os.path.join(repo, ".venv", "bin", "python")

    def scratch(self):
        d = tempfile.mkdtemp(prefix="ckpt-docs-")
        for name in os.listdir(self.repo):
            if name not in (".git",):
                os.symlink(os.path.join(self.repo, name),
                           os.path.join(d, name))
        return d

    def environ(self, scratch, block=None):
        env = dict(os.environ)
        if block is not None and any("torchrun" in l for l in block.body):
            # torchrun's agents leave torchelastic_* folders in the temporary
            # folder: in the scratch folder they go with it. Only there,
            # because other blocks show paths under /tmp in their output.
            env["TMPDIR"] = os.path.join(scratch, ".tmp")
            os.makedirs(env["TMPDIR"], exist_ok=True)
        tools = [os.path.join(self.build, p) for p in
                 ("tools/ckpt", "bench", "examples", "examples/train")]
        # The project's virtual environment comes next, as for a user who
        # activated it: `python`, `torchrun` and `pytest` are its.
        tools.append(os.path.dirname(self.python))
        env["PATH"] = os.pathsep.join(tools + [env.get("PATH", "")])
        env["PYTHONPATH"] = os.path.join(self.build, "python")
        env["XDG_STATE_HOME"] = os.path.join(scratch, ".state")
        env.pop("CKPT_CATALOG", None)
        return env

    def cxx_link_libraries(self):
        """The libraries the build links examples/quickstart with."""
        if self._cxx_libs is None:
            text = open(os.path.join(self.build, "build.ninja")).read()
            m = re.search(r"^build examples/quickstart:.*\n((?:  .*\n)*)",
                          text, re.M)
            libs = m and re.search(r"^  LINK_LIBRARIES = (.*)$", m.group(1),
                                   re.M)
            if not libs:
                raise RuntimeError(f"no link line of examples/quickstart in "
                                   f"{self.build}/build.ninja")
            self._cxx_libs = [
                a if a.startswith(("-", "/")) else os.path.join(self.build, a)
                for a in shlex.split(libs.group(1))]
        return self._cxx_libs


def run(cmd, cwd, env, stdin=None):
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, input=stdin,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=BLOCK_TIMEOUT_S)
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else \
            (e.stdout or "")
        return 124, out + f"\n(timed out after {BLOCK_TIMEOUT_S} s)"


def parse_transcript(body):
    """[(command, expected output lines)] of a `$ ` transcript."""
    steps, i = [], 0
    while i < len(body):
        line = body[i]
        if not line.startswith("$ "):
            if line.strip():
                raise ValueError(f"output before the first `$ ` command: "
                                 f"{line!r}")
            i += 1
            continue
        cmd = line[2:]
        i += 1
        # The shell's continuation prompt: after a trailing backslash, or
        # inside an open quote, the command goes on in lines "> ...".
        while i < len(body) and (body[i].startswith("> ") or
                                 cmd.endswith("\\")):
            cmd = cmd + "\n" + re.sub(r"^> ", "", body[i])
            i += 1
        out = []
        while i < len(body) and not body[i].startswith("$ "):
            out.append(body[i])
            i += 1
        steps.append((cmd, trim(out)))
    return steps


def run_transcript(block, env, scratch):
    """Runs the commands in one bash process (variables carry over), each
    one's output to its own file; returns an error message or None."""
    steps = parse_transcript(block.body)
    script = ["cd " + shlex.quote(scratch)]
    for n, (cmd, _) in enumerate(steps):
        script += [f"{{\n{cmd}\n}} >.out.{n} 2>&1 </dev/null",
                   f"echo $? >.rc.{n}"]
    rc, out = run(["bash", "-c", "\n".join(script)], scratch,
                  env.environ(scratch, block))
    for n, (cmd, expected) in enumerate(steps):
        try:
            got = open(os.path.join(scratch, f".out.{n}")).read()
            status = int(open(os.path.join(scratch, f".rc.{n}")).read())
        except (OSError, ValueError):
            return f"`$ {cmd}` did not run (the shell ended: {rc})\n{out}"
        want_status = 0
        if expected and EXIT_LINE.match(expected[-1].strip()):
            want_status = int(EXIT_LINE.match(expected[-1].strip()).group(1))
            expected = trim(expected[:-1])
        got_lines = trim(got.rstrip("\n").split("\n")) if got else []
        if status != want_status:
            return (f"`$ {cmd}` exited {status}, not {want_status}; "
                    f"it printed:\n{got}")
        if expected and not output_matches(expected, got_lines):
            return (f"`$ {cmd}` printed other output than shown.\n"
                    f"shown:\n" + "\n".join(expected) +
                    "\nprinted:\n" + "\n".join(got_lines))
    return None


def run_block(block, env):
    """Runs one program block; returns an error message or None."""
    scratch = env.scratch()
    try:
        e = env.environ(scratch, block)
        src = "\n".join(block.body) + "\n"
        if block.lang in SHELL:
            if any(l.startswith("$ ") for l in block.body):
                return run_transcript(block, env, scratch)
            rc, out = run(["bash", "-e", "-o", "pipefail", "-c", src],
                          scratch, e)
        elif block.lang in PYTHON:
            with open(os.path.join(scratch, "block.py"), "w") as f:
                f.write(src)
            rc, out = run([env.python, "block.py"], scratch, e)
        else:
            c = block.lang in C
            name = os.path.join(scratch, "block." + ("c" if c else "cc"))
            with open(name, "w") as f:
                f.write(src)
            exe = os.path.join(scratch, "block")
            inc = ["-I", os.path.join(env.repo, "include")]
            if c:
                capi = os.path.join(env.build, "src/capi")
                cmd = ["cc", "-std=c11", "-Wall", "-Werror", *inc, name,
                       "-L" + capi, "-lckpt", "-Wl,-rpath," + capi,
                       "-o", exe]
            else:
                cmd = ["g++", "-std=c++20", "-Wall", "-Werror", *inc, name,
                       *env.cxx_link_libraries(), "-ldl", "-pthread",
                       "-o", exe]
            rc, out = run(cmd, scratch, e)
            if rc != 0:
                return f"does not compile ({' '.join(cmd[:2])} ...):\n{out}"
            rc, out = run([exe], scratch, e)
        if rc != 0:
            return f"exited {rc}:\n{out}"
        return None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# --- links -------------------------------------------------------------

def slug(heading):
    """GitHub's anchor of a heading."""
    s = re.sub(r"[`*_]|\[|\]\([^)]*\)", "", heading.strip().lower())
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors_of(path):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def check_links(path, repo, shown):
    """Errors for the relative links of a file that lead nowhere."""
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "", text)
    errors = []
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target):
            continue
        file_part, _, frag = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path),
                                             file_part)) if file_part else path
        line = text[:m.start()].count("\n") + 1
        if not os.path.exists(dest):
            errors.append(f"{shown}: link to {target}: no such file")
        elif path.startswith(repo + os.sep) and \
                not dest.startswith(repo + os.sep):
            errors.append(f"{shown}: link to {target}: outside the repository")
        elif frag and dest.endswith(".md") and frag not in anchors_of(dest):
            errors.append(f"{shown}: link to {target}: no heading #{frag}")
        del line
    return errors


# --- main --------------------------------------------------------------

def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build/release",
                    help="the build folder, relative to the repository")
    ap.add_argument("--list", action="store_true",
                    help="list the blocks and what would be done; run none")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    files = args.files or ["README.md"] + sorted(glob.glob("docs/*.md",
                                                           root_dir=repo))
    files = [os.path.abspath(os.path.join(repo, f)) if not os.path.isabs(f)
             else f for f in files]
    env = Env(repo, args.build)
    failures = []
    for path in files:
        shown = os.path.relpath(path, repo)
        ran, not_run, texts = 0, {}, 0
        for b in blocks_of(path):
            b.path = shown
            problem = None
            if not b.lang:
                problem = ("no language in the info string (```text for "
                           "what is not a program)")
            elif b.lang in NOT_PROGRAMS:
                if b.marked_not_run:
                    problem = f"```{b.lang} is never run: drop `not-run`"
                texts += 1
            elif b.lang not in PROGRAMS:
                problem = f"unknown language {b.lang!r}"
            elif b.marked_not_run:
                if not b.not_run:
                    problem = "not-run without a reason"
                else:
                    not_run[b.not_run] = not_run.get(b.not_run, 0) + 1
            elif args.list:
                print(f"  would run {b.where()} ({b.lang})")
            else:
                print(f"  running {b.where()} ({b.lang}) ...", flush=True)
                problem = run_block(b, env)
                ran += 1
            if problem:
                failures.append(f"{b.where()}: ```{b.info}: {problem}")
                print(f"FAIL {b.where()}: {problem}", flush=True)
        for e in check_links(path, repo, shown):
            failures.append(e)
            print("FAIL " + e)
        n = sum(not_run.values())
        print(f"{shown}: {ran} run, {n} not run, {texts} text")
        for reason, count in sorted(not_run.items()):
            print(f"    not run ({count}): {reason}")
    if failures:
        print(f"\ncheck-docs: {len(failures)} failure(s):")
        for f in failures:
            print("  " + f.split("\n")[0])
        return 1
    print("check-docs: every block ran as shown; every link resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
