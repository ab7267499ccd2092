#!/usr/bin/env python3
"""The layering rules of the Python package (scripts/check-layering.sh runs
this):
  - no Python source file under python/ grows past 700 lines: split it by
    idea;
  - no import circle among the modules of python/ckpt: each module imports
    only modules below it, so that any of them can be read (and imported)
    without the ones above;
  - integrations depend on the core, never the reverse: a module that
    imports a framework (torch, lightning, jax, keras, ...) as it loads is
    an integration (ckpt.torch, ckpt.lightning, ckpt.jax and their private
    modules), and no other module of the package imports one, even
    inside a function, so that `import ckpt` needs none of them.

    scripts/check-python-layering.py [REPO_ROOT]

Prints every breach and exits 1 when there is one. Imports are read with
`ast`, wherever they stand in a module (a function's import is as much a
dependency as a module's), so nothing is imported or run.
"""

import ast
import os
import sys

LIMIT = 700
PACKAGE = "ckpt"
# The frameworks an integration module imports as it loads.
FRAMEWORKS = {"torch", "lightning", "pytorch_lightning", "torchdata", "jax",
              "jaxlib", "flax", "orbax", "keras", "tensorflow"}


def long_files(root):
    """(path, lines) of each .py file under python/ over LIMIT lines."""
    out = []
    for top, dirs, files in os.walk(os.path.join(root, "python")):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(top, name)
                with open(path, encoding="utf-8") as f:
                    lines = sum(1 for _ in f)
                if lines > LIMIT:
                    out.append((os.path.relpath(path, root), lines))
    return out


def modules(package_dir):
    """{module name: path} of the package's modules ("ckpt" is its
    __init__.py)."""
    out = {}
    for name in sorted(os.listdir(package_dir)):
        if name.endswith(".py"):
            stem = name[:-3]
            out[PACKAGE if stem == "__init__" else f"{PACKAGE}.{stem}"] = \
                os.path.join(package_dir, name)
    return out


def imports(path, name, known):
    """The package's modules that module `name` imports."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = name if name == PACKAGE else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    out.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(filter(None, [package, base]))
            if base != PACKAGE and not base.startswith(PACKAGE + "."):
                continue
            for alias in node.names:
                # `from ckpt import _x` names module ckpt._x; any other
                # name comes from the module `base` itself.
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in known else base)
    out.discard(name)  # a module naming itself imports nothing new
    return out


def loads_a_framework(path):
    """Whether the module at `path` imports a framework at its top level
    (not inside a function: a core module may reach one lazily)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        # A guarded import (try/except ImportError) counts as well.
        for sub in ast.walk(node) if isinstance(node, ast.Try) else [node]:
            names = []
            if isinstance(sub, ast.Import):
                names = [a.name for a in sub.names]
            elif isinstance(sub, ast.ImportFrom) and not sub.level:
                names = [sub.module or ""]
            if any(n.split(".")[0] in FRAMEWORKS for n in names):
                return True
    return False


def circles(graph):
    """Each import circle of `graph` ({module: {modules it imports}}), as
    the list of its modules with the first repeated at the end."""
    found, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                found.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def check(root):
    """The breaches of the rules in the repository at `root`, as lines."""
    problems = [f"check-layering: {path} has {lines} lines (limit {LIMIT}): "
                f"split it by idea" for path, lines in long_files(root)]
    package_dir = os.path.join(root, "python", PACKAGE)
    if os.path.isdir(package_dir):
        known = modules(package_dir)
        graph = {name: imports(path, name, known)
                 for name, path in known.items()}
        for circle in circles(graph):
            problems.append("check-layering: an import circle in python/"
                            f"{PACKAGE}: " + " -> ".join(circle))
        integrations = {name for name, path in known.items()
                        if loads_a_framework(path)}
        for name in sorted(set(known) - integrations):
            for dep in sorted(graph[name] & integrations):
                problems.append(
                    f"check-layering: core module {name} imports the "
                    f"integration {dep}: integrations depend on the core, "
                    "never the reverse")
    return problems


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..")
    problems = check(root)
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
