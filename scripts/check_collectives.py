#!/usr/bin/python3
"""Every collective payload is a message of the message layer
(src/messages/messages.h); run by scripts/check-layering.sh.

    /usr/bin/python3 scripts/check_collectives.py [ROOT]

Over the C++ sources git tracks under src/ and tools/ (tests aside):

  - a collective call (AllGather, Broadcast or SendRecv of the Communicator
    in include/ckpt/communicator.h) stands only in the protocol files below;
  - in those, each call's payload (its first argument) is one Encode*(...)
    call, or a variable whose nearest assignment before the call is one; a
    conditional whose branches are such calls or nothing (`sending ?
    EncodeX(...) : std::string()`, for a SendRecv that only receives)
    counts too;
  - and those files build or parse no text with string streams;
  - the bulk calls (SendRecvInto, BroadcastInto: a chunk's raw bytes,
    received straight into memory the receiver sized from the plans) stand
    only in src/checkpoint/read_once_exchange.cc, where each goes right after the
    message that frames it.

Left out on purpose, as messages.h says: the communicator implementations
(src/dist, and src/capi/c_catalog_comm.cc, which adapts a caller's
callbacks), which move the bytes they are given, and src/capi/c_mpi.cc,
which passes the C API caller's own payload through as opaque bytes.
Barrier carries no payload. Prints every breach; exits 1 when there is one.
"""

import re
import subprocess
import sys

PROTOCOL_FILES = {
    "src/checkpoint/read_once_exchange.cc",
    "src/checkpoint/save.cc",
    "src/checkpoint/load.cc",
    "src/checkpoint/read_once.cc",
    "src/checkpoint/read_once_measure.cc",
    "src/checkpoint/read_once_node.cc",
    "src/messages/tier_messages.cc",
    "src/tiers/tier_reshard.cc",
    "src/tiers/tier_restore.cc",
    "src/tiers/tier_transfer.cc",
    "src/tiers/tiered_manager.cc",
    "src/runner/job_runner.cc",
}
EXEMPT = ("src/dist/", "src/capi/c_catalog_comm.cc", "src/capi/c_mpi.cc")

CALL = re.compile(r"\b(AllGather|Broadcast|SendRecv)\s*\(")
BULK = re.compile(r"\b(SendRecvInto|BroadcastInto)\s*\(")
BULK_FILES = {"src/checkpoint/read_once_exchange.cc"}
STREAM = re.compile(r"\b(i|o)?stringstream\b")
ENCODED = re.compile(r"\bEncode\w*\s*\(")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def strip_comments(text):
    """The text with // and /* */ comments blanked (line numbers kept)."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group()),
                  text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def first_argument(text, open_paren, whole=False):
    """The first argument of the call whose '(' is at `open_paren` (with
    `whole`, every argument: the text up to the matching ')')."""
    depth = 0
    for i in range(open_paren, len(text)):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return text[open_paren + 1:i]
        elif c == "," and depth == 1 and not whole:
            return text[open_paren + 1:i]
    return text[open_paren + 1:]


def top_level(expr, char):
    """The offset of the first `char` outside brackets and quotes, or -1."""
    depth, quote = 0, None
    for i, c in enumerate(expr):
        if quote:
            if c == quote and expr[i - 1] != "\\":
                quote = None
        elif c in "\"'":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == char and depth == 0:
            return i
    return -1


def is_encoded(expr, empty_ok=False):
    """Whether `expr` is one Encode*() call (or a conditional of them)."""
    expr = expr.strip()
    question = top_level(expr, "?")
    if question >= 0:
        rest = expr[question + 1:]
        colon = top_level(rest, ":")
        return colon >= 0 and all(
            is_encoded(branch, empty_ok=True)
            for branch in (rest[:colon], rest[colon + 1:]))
    if empty_ok and expr in ('""', "std::string()", "{}"):
        return True
    m = ENCODED.match(expr)
    return m is not None and first_argument(expr, m.end() - 1, whole=True) \
        == expr[m.end():-1]


def encoded_variable(text, name, before):
    """Whether the nearest assignment to `name` before offset `before` is
    an Encode*() call."""
    value = None
    for m in re.finditer(r"\b%s\s*=(?!=)([^;]*);" % re.escape(name),
                         text[:before]):
        value = m.group(1)
    return value is not None and is_encoded(value)


def breaches(path, text):
    out = []
    text = strip_comments(text)
    line_of = lambda offset: text.count("\n", 0, offset) + 1
    protocol = path in PROTOCOL_FILES
    for m in CALL.finditer(text):
        where = "%s:%d" % (path, line_of(m.start()))
        if not protocol:
            out.append("%s: %s outside the protocol files (%s)" %
                       (where, m.group(1), ", ".join(sorted(PROTOCOL_FILES))))
            continue
        arg = " ".join(first_argument(text, m.end() - 1).split())
        if is_encoded(arg):
            continue
        if IDENTIFIER.fullmatch(arg) and encoded_variable(text, arg,
                                                          m.start()):
            continue
        out.append("%s: the payload of %s is not an Encode*() message: %s" %
                   (where, m.group(1), arg))
    for m in BULK.finditer(text):
        if path not in BULK_FILES:
            out.append("%s:%d: %s (raw bytes) outside %s" %
                       (path, line_of(m.start()), m.group(1),
                        ", ".join(sorted(BULK_FILES))))
    if protocol:
        for m in STREAM.finditer(text):
            out.append("%s:%d: a string stream in a protocol file (payloads "
                       "are messages of src/messages/messages.h)" %
                       (path, line_of(m.start())))
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    files = subprocess.run(
        ["git", "ls-files", "src/*.cc", "src/*.h", "tools/*.cc", "tools/*.h"],
        cwd=root, check=True, stdout=subprocess.PIPE, text=True).stdout.split()
    found = []
    for path in files:
        if path.endswith("_test.cc") or path.startswith(EXEMPT):
            continue
        with open("%s/%s" % (root, path), encoding="utf-8") as f:
            found += breaches(path, f.read())
    for line in found:
        print("check-layering: " + line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
