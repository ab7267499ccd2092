#!/usr/bin/python3
"""Tests of scripts/check-layering.sh and scripts/check-python-layering.py:
they pass a tree that keeps the layering rules and fail one that breaks
them, naming the breach.

    /usr/bin/python3 scripts/test_check_layering.py

Each test builds a small repository in a temporary folder (a git one: the
shell script reads the tracked files), with the checkers copied in,
and runs check-layering.sh on it. No build is needed.
"""

import os
import shutil
import subprocess
import tempfile
import unittest

SCRIPTS = os.path.dirname(os.path.abspath(__file__))

# A tree that keeps every rule: a library file, a test that uses test
# support, the benchmark library and the command in front of it, and a
# package whose modules import downwards only.
GOOD = {
    "src/checkpoint/thing.cc": '#include "checkpoint/thing.h"\n',
    "src/checkpoint/thing.h": "#pragma once\n",
    "src/checkpoint/thing_test.cc": '#include "testing/temp_dir.h"\n',
    "src/testing/temp_dir.h": "#pragma once\n",
    "src/testing/temp_dir.cc": '#include "testing/temp_dir.h"\n',
    "bench/core/bench.h": '#include "ckpt/status.h"\n',
    "bench/core/bench.cc": '#include "core/bench.h"\n',
    "tools/ckpt/common.h": "#pragma once\n",
    "tools/ckpt/bench.cc": '#include "common.h"\n#include "core/bench.h"\n',
    "python/ckpt/__init__.py": "from ckpt._a import A\n",
    "python/ckpt/_a.py": "from ckpt import _b\n\nA = _b.B\n",
    "python/ckpt/_b.py": "import os\n\nB = os.sep\n",
    "python/tests/test_a.py": "import ckpt\n",
}


def check(changes):
    """(exit status, output) of check-layering.sh on GOOD with `changes`
    ({path: text}) applied."""
    with tempfile.TemporaryDirectory() as d:
        os.mkdir(os.path.join(d, "scripts"))
        for name in ("check-layering.sh", "check-python-layering.py",
                     "check_collectives.py"):
            shutil.copy(os.path.join(SCRIPTS, name),
                        os.path.join(d, "scripts", name))
        for path, text in {**GOOD, **changes}.items():
            os.makedirs(os.path.dirname(os.path.join(d, path)),
                        exist_ok=True)
            with open(os.path.join(d, path), "w") as f:
                f.write(text)
        subprocess.run(["git", "init", "-q", d], check=True)
        subprocess.run(["git", "-C", d, "add", "."], check=True)
        p = subprocess.run(["sh", os.path.join(d, "scripts",
                                               "check-layering.sh")],
                           cwd=d, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
        return p.returncode, p.stdout


class CheckLayeringTest(unittest.TestCase):

    def test_passes_a_tree_that_keeps_the_rules(self):
        self.assertEqual(check({}), (0, ""))

    def test_fails_library_code_that_includes_test_support(self):
        code, out = check({"src/checkpoint/thing.cc":
                           '#include "testing/temp_dir.h"\n'})
        self.assertEqual(code, 1)
        self.assertIn("test support (src/testing) included", out)
        self.assertIn("src/checkpoint/thing.cc:1:", out)

    def test_fails_a_command_that_includes_checkpoint_internals(self):
        code, out = check({"tools/ckpt/gc.cc":
                           '#include "ckpt/checkpoint_manager.h"\n'
                           '#include "checkpoint/manifests.h"\n'})
        self.assertEqual(code, 1)
        self.assertIn("the ckpt command includes an internal header", out)
        self.assertIn("tools/ckpt/gc.cc:2:", out)
        # Its tests may, and the public header is the way in.
        self.assertEqual(check({"tools/ckpt/cli_test.cc":
                                '#include "checkpoint/manifests.h"\n',
                                "tools/ckpt/gc.cc":
                                '#include "ckpt/checkpoint_manager.h"\n'}),
                         (0, ""))

    def test_fails_a_public_header_that_includes_test_support(self):
        code, out = check({"include/ckpt/thing.h":
                           '#include "testing/temp_dir.h"\n'})
        self.assertEqual(code, 1)
        self.assertIn("include/ckpt/thing.h:1:", out)

    def test_fails_an_include_of_a_layer_above(self):
        for path, line in (
                ("src/checkpoint/thing.cc", '#include "tiers/tier_share.h"\n'),
                ("src/catalog/sql.cc", '#include "ckpt/tiered.h"\n'),
                ("src/tiers/share.cc", '#include "runner/job.h"\n'),
                ("src/data/reader.cc", '#include "checkpoint/thing.h"\n'),
                ("src/lease/lease.cc", '#include "tiers/share.h"\n'),
                ("src/checkpoint/sync.cc",
                 '#include "format/tier_layout.h"\n')):
            code, out = check({path: line})
            self.assertEqual(code, 1, path)
            self.assertIn("a header of a layer above included from below",
                          out)
            self.assertIn(path + ":1:", out)
        # Tests may reach up (a checkpoint test of a tiered save), and a
        # layer may include what lies below it.
        self.assertEqual(check({
            "src/checkpoint/thing_test.cc": '#include "ckpt/tiered.h"\n',
            "src/tiers/share.cc": '#include "checkpoint/thing.h"\n',
            "src/runner/job.cc": '#include "tiers/share.h"\n'}), (0, ""))

    def test_fails_the_library_including_the_benchmark(self):
        code, out = check({"src/checkpoint/thing.cc":
                           '#include "core/bench.h"\n'})
        self.assertEqual(code, 1)
        self.assertIn("a header of a layer above included from below", out)
        self.assertIn("src/checkpoint/thing.cc:1:", out)

    def test_fails_the_benchmark_including_a_tool_header(self):
        code, out = check({"bench/core/bench.cc":
                           '#include "core/bench.h"\n#include "common.h"\n'})
        self.assertEqual(code, 1)
        self.assertIn("a header of a layer above included from below", out)
        self.assertIn("bench/core/bench.cc:2:", out)

    def test_fails_benchmark_machinery_in_the_tools(self):
        code, out = check({"tools/ckpt/bench_disk.cc":
                           '#include "common.h"\n'})
        self.assertEqual(code, 1)
        self.assertIn("benchmark machinery under tools/", out)
        self.assertIn("tools/ckpt/bench_disk.cc", out)

    def test_fails_a_benchmark_file_over_700_lines(self):
        code, out = check({"bench/core/bench.cc": "//\n" * 701})
        self.assertEqual(code, 1)
        self.assertIn("bench/core/bench.cc has 701 lines", out)

    def test_fails_mkdtemp_in_a_test(self):
        # Spelt in two parts, so that this file does not break the rule.
        name = "mk" + "dtemp"
        code, out = check({"python/tests/test_a.py":
                           f"import tempfile\nd = tempfile.{name}()\n"})
        self.assertEqual(code, 1)
        self.assertIn(name + " in a test outside the fixtures", out)
        self.assertIn("python/tests/test_a.py:2:", out)
        self.assertEqual(check({"src/testing/temp_dir.cc":
                                f"// {name}(3), and removed\n"}), (0, ""))

    def test_fails_a_python_file_over_700_lines(self):
        code, out = check({"python/tests/test_a.py": "x = 1\n" * 701})
        self.assertEqual(code, 1)
        self.assertIn("python/tests/test_a.py has 701 lines (limit 700)",
                      out)
        self.assertEqual(check({"python/tests/test_a.py": "x = 1\n" * 700}),
                         (0, ""))

    def test_fails_an_import_circle(self):
        code, out = check({"python/ckpt/_b.py": "from ckpt import _a\n"})
        self.assertEqual(code, 1)
        self.assertIn("an import circle in python/ckpt: "
                      "ckpt._a -> ckpt._b -> ckpt._a", out)

    def test_fails_a_circle_through_a_function_and_the_package(self):
        # An import inside a function, of a name the package's __init__
        # exports, closes a circle through __init__ all the same.
        code, out = check({"python/ckpt/_b.py":
                           "def f():\n    from ckpt import A\n    return A\n"})
        self.assertEqual(code, 1)
        self.assertIn("ckpt -> ckpt._a -> ckpt._b -> ckpt", out)

    def test_fails_a_relative_import_circle(self):
        code, out = check({"python/ckpt/_b.py": "from ._a import A\n"})
        self.assertEqual(code, 1)
        self.assertIn("ckpt._a -> ckpt._b -> ckpt._a", out)

    def test_fails_the_core_importing_an_integration(self):
        integration = {"python/ckpt/torch.py": "import torch\n\nfrom ckpt import _a\n"}
        self.assertEqual(check(integration), (0, ""))
        code, out = check({**integration, "python/ckpt/_b.py":
                           "def f():\n    import ckpt.torch\n"})
        self.assertEqual(code, 1)
        self.assertIn("core module ckpt._b imports the integration "
                      "ckpt.torch", out)
        # A framework reached inside a function keeps a module core.
        self.assertEqual(check({"python/ckpt/_b.py":
                                "def f():\n    import torch\n"}), (0, ""))


if __name__ == "__main__":
    unittest.main()
