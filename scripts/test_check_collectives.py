#!/usr/bin/python3
"""Tests of scripts/check-layering.sh's rule on collectives
(scripts/check_collectives.py): a payload that is not a message of the
message layer, or a collective outside the protocol files, fails it; the
repository's own tree passes.

    /usr/bin/python3 scripts/test_check_collectives.py

Each test plants C++ files in a temporary git repository holding a copy of
the checkers and runs check-layering.sh there. No build is needed.
"""

import os
import shutil
import subprocess
import tempfile
import unittest

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(SCRIPTS)

GOOD_TIER = """
Status F(Communicator* comm_, const Status& mine) {
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> all,
                        comm_->AllGather(EncodeRankStatus({mine})));
  std::string listed;
  if (rank_ == 0) listed = EncodeDurableSteps(listing);
  CKPT_ASSIGN_OR_RETURN(listed, comm_->Broadcast(listed, 0));
  const std::string msg =
      sending ? EncodeTransferPart(sender->Next()) : std::string();
  return comm.SendRecv(msg, peer, -1).status();  // comment: AllGather("x")
}
"""


def check(files):
    """(exit status, output) of check-layering.sh over `files` (path ->
    text), in a fresh repository."""
    with tempfile.TemporaryDirectory() as d:
        os.mkdir(os.path.join(d, "scripts"))
        for name in ("check-layering.sh", "check_collectives.py",
                     "check-python-layering.py"):
            shutil.copy(os.path.join(SCRIPTS, name),
                        os.path.join(d, "scripts", name))
        for path, text in files.items():
            os.makedirs(os.path.join(d, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(d, path), "w") as f:
                f.write(text)
        subprocess.run(["git", "init", "-q", d], check=True)
        subprocess.run(["git", "add", "-A"], cwd=d, check=True)
        p = subprocess.run(["sh", "scripts/check-layering.sh"], cwd=d,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=120)
        return p.returncode, p.stdout


class CheckCollectivesTest(unittest.TestCase):

    def assertFails(self, files, *expected):
        code, out = check(files)
        self.assertEqual(code, 1, out)
        for text in expected:
            self.assertIn(text, out)

    def test_messages_in_the_protocol_files_pass(self):
        code, out = check({"src/tiers/tier_restore.cc": GOOD_TIER})
        self.assertEqual((code, out), (0, ""))

    def test_a_text_payload_fails(self):
        self.assertFails(
            {"src/tiers/tier_restore.cc":
             "auto all = comm_->AllGather(mine.ok() ? \"\" : "
             "mine.ToString());\n"},
            "tier_restore.cc:1: the payload of AllGather is not an "
            "Encode*() message: mine.ok() ? \"\" : mine.ToString()")

    def test_a_number_as_text_fails(self):
        self.assertFails(
            {"src/runner/job_runner.cc":
             "auto got = comm().Broadcast(std::to_string(step), 0);\n"},
            "job_runner.cc:1: the payload of Broadcast")

    def test_a_variable_built_as_text_fails(self):
        self.assertFails(
            {"src/tiers/tiered_manager.cc":
             "std::string mine = EncodeRankStatus({s});\n"
             "mine = \"!\" + s.ToString();\n"
             "auto all = comm_->AllGather(mine);\n"},
            "tiered_manager.cc:3: the payload of AllGather is not an "
            "Encode*() message: mine")

    def test_a_message_with_text_added_fails(self):
        self.assertFails(
            {"src/tiers/tier_reshard.cc":
             "auto all = comm_->AllGather(EncodeLackingShares(l) + \"x\");\n"},
            "tier_reshard.cc:1: the payload of AllGather")

    def test_a_collective_outside_the_protocol_files_fails(self):
        self.assertFails(
            {"src/checkpoint/gc.cc":
             "auto all = comm.AllGather(EncodeRankStatus({s}));\n"},
            "src/checkpoint/gc.cc:1: AllGather outside the protocol files")

    def test_a_string_stream_in_a_protocol_file_fails(self):
        self.assertFails(
            {"src/tiers/tier_transfer.cc":
             "std::istringstream in(all[r]);\n"},
            "tier_transfer.cc:1: a string stream in a protocol file")

    def test_raw_bytes_outside_the_read_once_exchange_fail(self):
        self.assertFails(
            {"src/tiers/tier_transfer.cc":
             "Status s = comm_->SendRecvInto(bytes, peer, into, -1);\n"},
            "tier_transfer.cc:1: SendRecvInto (raw bytes) outside "
            "src/checkpoint/read_once_exchange.cc")
        code, out = check({
            "src/checkpoint/read_once_exchange.cc":
                "Status s = comm.BroadcastInto(landing, r);\n"})
        self.assertEqual((code, out), (0, ""))

    def test_implementations_tests_and_barriers_are_left_alone(self):
        code, out = check({
            "src/dist/thread_communicator.cc":
                "return Broadcast(std::string(data), root);\n",
            "src/capi/c_mpi.cc": "auto r = Comm(ctx)->AllGather(view);\n",
            "src/tiers/tiered_test.cc": "comm->AllGather(\"x\");\n",
            "src/checkpoint/gc.cc": "return comm.Barrier();\n",
        })
        self.assertEqual((code, out), (0, ""))

    def test_the_repository_passes(self):
        p = subprocess.run(["sh", "scripts/check-layering.sh"], cwd=REPO,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout)


if __name__ == "__main__":
    unittest.main()
