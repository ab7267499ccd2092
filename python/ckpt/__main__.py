"""python -m ckpt --version: the package's version and its library."""

import sys

import ckpt
from ckpt import _ckpt


def main(argv):
    if argv in (["--version"], ["-V"]):
        print(f"ckpt {ckpt.__version__} ({_ckpt.library_path()})")
        return 0
    print("usage: python -m ckpt --version\n"
          "(the command-line tool is `ckpt`; see `ckpt --help`)",
          file=sys.stderr)
    return 0 if argv in (["--help"], ["-h"]) else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
