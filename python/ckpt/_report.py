"""ckpt.report: the HTML report of a root or a catalog (docs/report.md),
written by the command-line tool the package carries."""

import os
import subprocess

from ckpt import _errors
from ckpt._cli import cli_path


def report(root, path, *, catalog=None, goal="min", bench=None):
    """Writes one self-contained HTML page to `path` and returns `path`.

    Of `root` (a URL or path): the timeline of its saves, the bytes each
    wrote, the incremental lineage, retention, each save's durations and
    its ranks' write and wait times, and the metrics; `catalog` (a URL or
    path) adds the steps the catalog knows were deleted and the job's local
    tier; `bench` (a path), the output of `ckpt bench --json` on the same
    disk, draws its raw write speed beside each save's throughput. With
    root=None and a `catalog`: every job, its newest and best
    checkpoints (best: the lowest value of its first metric, or the highest
    with goal="max") and the metric curves across jobs.

    Runs the bundled `ckpt report`; its error raises the ckpt.Error
    subclass of its code (ckpt.NotFound for a root, catalog or bench file
    that is not there; ckpt.InvalidArgument when neither root nor catalog
    is given, or for a goal other than "min" or "max")."""
    if root is None and catalog is None:
        raise _errors.InvalidArgument("ckpt.report: name a root or a catalog")
    args = [cli_path(), "report"]
    if root is not None:
        args.append(os.fspath(root))
    if catalog is not None:
        args += ["--catalog", os.fspath(catalog)]
    if bench is not None:
        args += ["--bench", os.fspath(bench)]
    args += ["--goal", goal, "-o", os.fspath(path)]
    if not os.access(args[0], os.X_OK):
        raise _errors.FailedPrecondition(
            f"ckpt.report: {args[0]} is missing: this installation of the "
            "ckpt package has no command-line tool (reinstall the wheel)")
    done = subprocess.run(args, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise _cli_error(done.returncode, done.stderr)
    return path


def _cli_error(returncode, stderr):
    """The ckpt.Error subclass of a failed `ckpt report`: its first line
    is "ckpt report: CODE: message" (NotFound, ...), and exit status 2 a
    usage error (InvalidArgument), so that `except ckpt.NotFound` catches
    a missing root as it does from every other call."""
    text = stderr.strip() or f"ckpt report exited with {returncode}"
    prefix = "ckpt report: "
    if text.startswith(prefix):
        code, sep, rest = text[len(prefix):].partition(": ")
        cls = getattr(_errors, code, None) if sep else None
        if isinstance(cls, type) and issubclass(cls, _errors.Error):
            return cls(prefix + rest)
    if returncode == 2:
        return _errors.InvalidArgument(text)
    return _errors.Error(text)
