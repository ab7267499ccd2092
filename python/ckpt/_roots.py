"""Whether a root a manager opened with create=None exists: reading one
that does not is ckpt.NotFound naming it (a mistyped path, or S3 prefix,
is no silent fresh start; _manager.py).
"""

import os
import urllib.parse

from ckpt import _errors, _manager_handle


def is_store(url):
    """Whether `url` names an object store's root (s3://)."""
    return url.lower().startswith("s3://")


def _local_path(url):
    """The folder of a local root (a path, or a file:// URL, whose escapes
    the library decodes), else None."""
    if "://" not in url:
        return os.path.abspath(url)
    if url.lower().startswith("file://"):
        path = urllib.parse.unquote(url[len("file://"):])
        if path.startswith("/"):  # file://host/path: the library's
            return path
    return None


def key(url):
    """One spelling per root, for the managers a process keeps by root: a
    local root by its folder's real path (`run`, `./run`, `/abs/run/` and
    `file:///abs/run` are one folder, whose lease one manager holds; a
    second would wait for it), any other URL as it is."""
    path = _local_path(url)
    return url if path is None else os.path.realpath(path)


def missing(url, probe=True):
    """The path or URL of a root that does not exist, else None (it exists,
    or is mem://). A local root by its folder; an s3:// root, whose prefix
    holds no object (a mistyped one), by the library opening it without
    creating it, when `probe` (else it is taken as missing until a read
    looks)."""
    path = _local_path(url)
    if path is None and is_store(url):
        if not probe:
            return url
        try:
            _manager_handle.Manager(url, create=False).close()
        except _errors.NotFound:
            return url
        return None
    if path is None:
        return None
    return None if os.path.exists(path) else path


def not_a_ckpt_root(error, url, operation):
    """`error` (ckpt.NotFound: no committed checkpoint, or no such step, in
    `url`) of `operation`, a load, or, where `url` is a local folder that
    DCP's own FileSystemWriter wrote (its .metadata and *.distcp files;
    ckpt._dcp_files reads that format), a NotFound saying so and how to
    convert it: without that, "no committed checkpoint" reads as if the
    folder were empty. Where the root does not exist, a NotFound that says
    so, without the manager's advice to open it with create=True (no load
    takes that: an empty root has nothing to load either). The caller
    raises it from its __cause__."""
    gone = missing(url)
    if gone is not None:
        return _errors.NotFound(
            f"{operation}: root {gone} does not exist, so it holds no "
            f"checkpoint to load (check the path: `ckpt ls {gone}` lists "
            f"the checkpoints of a root)")
    path = _local_path(url)
    try:
        names = os.listdir(path) if path is not None else []
    except OSError:
        return error
    if ".metadata" not in names or not any(n.endswith(".distcp")
                                           for n in names):
        return error
    if any(n == "LATEST" or n.startswith("step-") for n in names):
        return error  # a ckpt root too (DCP files exported into it)
    hint = _errors.NotFound(
        f"{operation}: {path} holds a checkpoint written by "
        f"torch.distributed.checkpoint's own writer (FileSystemWriter: "
        f".metadata and .distcp files), not a ckpt root, so it has no "
        f"committed ckpt checkpoint; convert it into a ckpt root with "
        f"`ckpt import-dcp {path} NEW_ROOT --step N` (from Python: "
        f"ckpt.torch.import_dcp({path!r}, NEW_ROOT, N)) and load NEW_ROOT, "
        f"or read it with dcp.FileSystemReader")
    hint.__cause__ = error
    return hint
