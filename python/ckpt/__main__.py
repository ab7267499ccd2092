"""The `ckpt` command of the wheel, and `python -m ckpt`: both run the
command-line tool the package carries (ckpt/_bin/ckpt, the same program as
the build's tools/ckpt/ckpt) with the arguments given.

    ckpt --version
    python -m ckpt ls /data/run42
"""

import os
import sys

from ckpt._cli import cli_path


def main(argv=None):
    """Replaces this process with the bundled `ckpt` program (its exit
    status is the command's); returns 1 when the program is missing."""
    args = sys.argv[1:] if argv is None else list(argv)
    path = cli_path()
    if not os.access(path, os.X_OK):
        print(f"ckpt: {path} is missing or not executable: this "
              "installation of the ckpt package has no command-line tool "
              "(reinstall the ckpt wheel)", file=sys.stderr)
        return 1
    # `ckpt import-dcp` and `ckpt export --format dcp` run this package
    # with PyTorch in a Python: this one, unless the caller names another.
    os.environ.setdefault("CKPT_PYTHON", sys.executable)
    sys.stdout.flush()
    sys.stderr.flush()
    # exec, not a child process: signals (Ctrl-C), the exit status and the
    # terminal go to the tool itself.
    os.execv(path, ["ckpt"] + args)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
