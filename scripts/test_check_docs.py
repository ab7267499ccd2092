#!/usr/bin/python3
"""Tests of scripts/check-docs.py: it passes documents whose blocks run as
shown and fails the ones whose blocks do not.

    /usr/bin/python3 scripts/test_check_docs.py

Each test writes a small Markdown file into a temporary folder and runs the
checker on it. The blocks are shell blocks, so no build is needed.
"""

import os
import subprocess
import sys
import tempfile
import unittest

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "check-docs.py")
FENCE = "```"


def check(markdown):
    """(exit status, output) of the checker on one document."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "doc.md")
        with open(path, "w") as f:
            f.write(markdown)
        open(os.path.join(d, "other.md"), "w").write("# A heading\n")
        p = subprocess.run([sys.executable, CHECKER, path],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=120)
        return p.returncode, p.stdout


def block(info, *lines):
    return "\n".join([FENCE + info, *lines, FENCE, ""])


TRANSCRIPT = block("console",
                   "$ greeting=hello",
                   "$ echo $greeting && echo world",
                   "hello",
                   "world")


class CheckDocsTest(unittest.TestCase):
    def assertPasses(self, markdown):
        rc, out = check(markdown)
        self.assertEqual(rc, 0, out)
        return out

    def assertFails(self, markdown, why):
        rc, out = check(markdown)
        self.assertEqual(rc, 1, out)
        self.assertIn(why, out)
        return out

    def test_a_transcript_that_prints_what_it_shows_passes(self):
        out = self.assertPasses(TRANSCRIPT)
        self.assertIn("1 run, 0 not run", out)

    def test_a_wrong_command_fails(self):
        self.assertFails(TRANSCRIPT.replace("echo $greeting",
                                            "ehco $greeting"),
                         "exited 127")

    def test_a_wrong_shown_output_fails(self):
        self.assertFails(TRANSCRIPT.replace("world\n" + FENCE,
                                            "word\n" + FENCE),
                         "printed other output than shown")

    def test_a_failing_script_fails(self):
        self.assertFails(block("sh", "true", "false", "true"), "exited 1")
        self.assertPasses(block("sh", "true", "true"))

    def test_a_failing_python_block_fails(self):
        self.assertFails(block("python", "train_one_epoch()"), "NameError")
        self.assertPasses(block("python", "def f():", "    return 1",
                                "assert f() == 1"))

    def test_wildcards_stand_for_what_changes(self):
        self.assertPasses(block("console",
                                "$ echo at $(date +%s%N); seq 5; echo end",
                                "at ...",
                                "1",
                                "...",
                                "end"))
        self.assertFails(block("console",
                               "$ echo at $(date +%s%N); seq 5",
                               "at ...",
                               "1",
                               "...",
                               "6"),
                         "printed other output than shown")

    def test_a_command_goes_on_after_its_continuation_prompt(self):
        self.assertPasses(block("console",
                                "$ echo 'one",
                                "> two' \\",
                                "three",
                                "one",
                                "two three"))

    def test_table_padding_is_not_compared(self):
        self.assertPasses(block("console",
                                "$ printf 'A   B\\n1   22\\n'",
                                "A B",
                                "1     22"))

    def test_an_exit_status_is_checked(self):
        self.assertPasses(block("console", "$ sh -c 'exit 3'", "[exit 3]"))
        self.assertFails(block("console", "$ sh -c 'exit 3'", "[exit 4]"),
                         "exited 3, not 4")

    def test_not_run_needs_a_reason_and_is_counted(self):
        out = self.assertPasses(block("sh not-run: needs a GPU", "false"))
        self.assertIn("0 run, 1 not run", out)
        self.assertIn("needs a GPU", out)
        self.assertFails(block("sh not-run:", "false"),
                         "not-run without a reason")

    def test_every_block_names_its_language(self):
        self.assertFails(block("", "anything"), "no language")
        self.assertFails(block("rust", "fn main() {}"), "unknown language")
        out = self.assertPasses(block("text", "false"))
        self.assertIn("1 text", out)

    def test_links_must_resolve(self):
        self.assertPasses("[other](other.md) [heading](other.md#a-heading)\n")
        self.assertFails("[gone](gone.md)\n", "no such file")
        self.assertFails("[x](other.md#no-such-heading)\n",
                         "no heading #no-such-heading")


if __name__ == "__main__":
    unittest.main()
