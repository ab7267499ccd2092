"""What the Python load benchmarks (load_into.py, load_device.py) share:
their flags, and dropping a root's pages from the page cache."""
import argparse
import os
import sys


def parse_load_flags(doc, name, more=None):
    """--gib, --rounds, --dir and --json (and what `more(parser)` adds),
    parsed and checked; `doc`'s first line describes the program, `name`
    prefixes a refusal."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", default="/var/tmp")
    p.add_argument("--json", action="store_true")
    if more is not None:
        more(p)
    a = p.parse_args()
    if a.gib <= 0 or a.rounds < 1:
        sys.exit(f"{name}: --gib must be positive, --rounds >= 1")
    return a


def drop_cache(root):
    """Drops the pages of every file under `root` from the page cache, as
    after a restart, so that the next read comes from the disk."""
    for folder, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(folder, f), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
