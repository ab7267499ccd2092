"""consolidate(): one committed checkpoint as Hugging Face safetensors files.

The global tensors of a checkpoint, each assembled whole whatever world size
and sharding saved it, go into OUT/model.safetensors or, past
max_shard_size, into OUT/model-0000K-of-0000N.safetensors and the
OUT/model.safetensors.index.json that maps each tensor to its file: the
layout that transformers' from_pretrained and safetensors' readers open.

Each output file is made at its final size under a temporary name, mapped,
and filled by one load_into whose targets are NumPy views of the mapping:
the library reads the checkpoint's bytes straight into the file, so the
checkpoint is never held in memory beyond the page cache.
"""

import errno
import json
import math
import operator
import os
import re
import secrets
import struct
from collections.abc import Mapping
from fractions import Fraction

from ckpt import _dtypes, _errors, _tree
from ckpt._manager import CheckpointManager

try:
    import numpy as np
except ImportError:
    np = None

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

# safetensors readers refuse a longer header (the Rust crate's limit).
_MAX_HEADER = 100_000_000

# How max_shard_size strings count, as in transformers: GB is 10**9 bytes,
# GiB 2**30.
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


class _Tensor:
    __slots__ = ("entry", "name", "dtype", "shape", "width", "nbytes")

    def __init__(self, entry, name, dtype, shape, width):
        self.entry, self.name, self.dtype = entry, name, dtype
        self.shape, self.width = list(shape), width
        self.nbytes = width * math.prod(self.shape)


def consolidate(root, out_path, step=None, *, prefix=None,
                max_shard_size=5_000_000_000, metadata=None,
                overwrite=False):
    """Writes checkpoint `step` of `root` as Hugging Face safetensors files
    in the directory `out_path`, and returns the paths written.

    `root` is a URL or path (opened read-only) or a CheckpointManager of one
    process; `step` defaults to the newest committed. Every global tensor
    entry is written, whole, whatever world size and sharding saved it;
    blobs, metadata entries (scalars included) and rank-local entries are
    not. With `prefix`, only the tensors whose names start with it, written
    without it: prefix="model." writes "model.fc.weight" as "fc.weight".

    Tensors of `max_shard_size` bytes or less in all (an int, or a string
    such as "5GB", "500MB" or "2GiB": GB is 10**9 bytes, GiB 2**30) go
    into out_path/model.safetensors. More go, in entry order, into
    model-00001-of-0000N.safetensors, ... holding at most max_shard_size
    bytes of tensors each (a larger tensor gets a file of its own), and
    model.safetensors.index.json ({"metadata": {"total_size": bytes},
    "weight_map": {name: file}}), written last and returned last. Each
    file's __metadata__ is {"format": "pt"} and `metadata` (str -> str).
    Within a file the widest dtypes come first, so every tensor starts at
    a multiple of its element size.

    Each file is written under a temporary name in out_path (created if
    missing), fsynced, and renamed into place once all of them are
    complete; on any error none of this call's files is left behind.
    Files that exist already (or the entry file of the other layout, which
    a loader would take instead) raise ckpt.AlreadyExists unless
    overwrite=True, which replaces them (and removes that other entry
    file). A prefix that selects no tensor raises ckpt.NotFound. Errors
    are ckpt.Error subclasses naming the root, the step and the file.
    Needs NumPy.
    """
    if np is None:
        raise _errors.FailedPrecondition(
            "consolidate needs NumPy: it maps the output files as arrays")
    limit = _shard_size(max_shard_size)
    prefix = _prefix(prefix)
    file_metadata = _file_metadata(metadata)
    out_dir = os.path.abspath(os.fsdecode(out_path))

    if isinstance(root, CheckpointManager):
        mgr = root
    else:
        try:
            mgr = CheckpointManager(root, create=False)
        except _errors.Error as e:
            raise type(e)(f"consolidate {root}: {e}") from e
    which = "the newest step" if step is None else f"step {step}"
    what = f"consolidate {which} of {mgr.url}"
    if mgr.world_size != 1:
        # load_into is collective: every rank would write the same files.
        raise _errors.InvalidArgument(
            f"{what}: the manager has {mgr.world_size} ranks; consolidate "
            f"runs in one process (open the root without a communicator)")
    try:
        desc = mgr.describe(step, internal=True)
    except _errors.Error as e:
        raise type(e)(f"{what}: {e}") from e
    step = desc.info.step
    what = f"consolidate step {step} of {mgr.url}"

    tensors = _select(desc.entries, prefix, what)
    total = sum(t.nbytes for t in tensors)
    if total <= limit:
        groups, names = [tensors], [SINGLE_FILE]
        other_layout = INDEX_FILE
    else:
        groups = _split(tensors, limit)
        names = [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
                 for i in range(len(groups))]
        other_layout = SINGLE_FILE
    paths = [os.path.join(out_dir, n) for n in names]
    index_path = (os.path.join(out_dir, INDEX_FILE) if len(groups) > 1
                  else None)
    # Computed before anything is written: a bad file layout is refused
    # with the disk untouched.
    headers = [_header(g, file_metadata, what, p)
               for g, p in zip(groups, paths)]
    targets = paths + ([index_path] if index_path else [])
    other = os.path.join(out_dir, other_layout)
    existing = {p for p in targets + [other] if os.path.lexists(p)}
    if existing and not overwrite:
        first = next(p for p in targets + [other] if p in existing)
        raise _errors.AlreadyExists(
            f"{what}: {first} exists (overwrite=True replaces it)")

    created = _make_dir(out_dir, what)
    temps, placed = {}, []
    try:
        for path, header in zip(paths, headers):
            temps[path] = _temp_path(path)
            _write_shard(mgr, step, temps[path], header, what)
        if index_path:
            index = {"metadata": {"total_size": total},
                     "weight_map": {t.name: name
                                    for group, name in zip(groups, names)
                                    for t in group}}
            text = json.dumps(index, indent=2, sort_keys=True,
                              ensure_ascii=False) + "\n"
            temps[index_path] = _temp_path(index_path)
            _write_bytes(temps[index_path], text.encode("utf-8"), what)
        # Every file is complete and durable before the first rename; the
        # shards' names are durable before the index that names them.
        for path in paths:
            _place(temps[path], path, overwrite, what)
            del temps[path]
            placed.append(path)
        _fsync_dir(out_dir, what)
        if index_path:
            _place(temps[index_path], index_path, overwrite, what)
            del temps[index_path]
            placed.append(index_path)
            _fsync_dir(out_dir, what)
        if other in existing:
            # A loader would open it instead of what was just written.
            _io(os.unlink, other, what=f"{what}: removing {other}")
            _fsync_dir(out_dir, what)
    except BaseException:
        for tmp in temps.values():
            _remove_quietly(tmp)
        for path in placed:
            if path not in existing:
                _remove_quietly(path)
        if created:
            try:
                os.rmdir(out_dir)
            except OSError:
                pass  # not empty: someone else's files
        raise
    return targets


def _shard_size(value):
    """max_shard_size in bytes: an int, or a string like "5GB" or "2GiB"."""
    size = None
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*", value)
        # A final lower-case b means bits to transformers; refused rather
        # than guessed.
        if m and not m.group(2).endswith("b"):
            factor = _UNITS.get(m.group(2).upper())
            if factor is not None:
                size = int(Fraction(m.group(1)) * factor)
    elif not isinstance(value, bool):
        try:
            size = operator.index(value)
        except TypeError:
            pass
    if size is None or size < 1:
        raise _errors.InvalidArgument(
            f"max_shard_size {value!r}: give a positive number of bytes, an "
            f"int or a string such as \"5GB\", \"500MB\" or \"2GiB\" "
            f"(GB = 10**9 bytes, GiB = 2**30)")
    return size


def _prefix(prefix):
    if prefix is None:
        return ""
    if not isinstance(prefix, str):
        raise _errors.InvalidArgument(
            f"prefix must be a str, not {type(prefix).__name__}")
    return prefix


def _file_metadata(metadata):
    """Every file's __metadata__: {"format": "pt"} and `metadata`."""
    out = {"format": "pt"}
    if metadata is None:
        return out
    if not isinstance(metadata, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str)
            for k, v in metadata.items()):
        raise _errors.InvalidArgument("metadata must map str to str")
    for text in [*metadata, *metadata.values()]:
        problem = _tree.text_problem(text)
        if problem is not None:
            raise _errors.InvalidArgument(f"metadata {text!r}: {problem}")
    out.update(metadata)
    return out


def _select(entries, prefix, what):
    tensors = []
    for e in entries:
        if (e.kind != "tensor" or e.owner >= 0 or e.name == _tree.TREE_ENTRY
                or not e.name.startswith(prefix)):
            continue
        name = e.name[len(prefix):]
        if not name or name == "__metadata__":
            raise _errors.InvalidArgument(
                f"{what}: entry {e.name!r} would be written as {name!r}, "
                f"which a safetensors file cannot name a tensor")
        width = _dtypes._WIDTHS.get(e.dtype)
        if width is None:
            raise _errors.InvalidArgument(
                f"{what}: entry {e.name!r} has dtype {e.dtype!r}, which "
                f"consolidate does not know")
        tensors.append(_Tensor(e.name, name, e.dtype, e.shape, width))
    if not tensors:
        raise _errors.NotFound(
            f"{what}: no tensor entry" + (f" starts with prefix {prefix!r}"
                                          if prefix else ""))
    return tensors


def _split(tensors, limit):
    """The tensors, in order, in groups of at most `limit` bytes; a tensor
    larger than that makes a group of its own."""
    groups, size = [], 0
    for t in tensors:
        if not groups or size + t.nbytes > limit:
            groups.append([])
            size = 0
        groups[-1].append(t)
        size += t.nbytes
    return groups


def _header(tensors, file_metadata, what, path):
    """(the file's bytes before its data section, [(tensor, offset)])."""
    # The widest elements first: the data section starts 8-aligned, so each
    # tensor then starts at a multiple of its element size, and readers
    # that map the file can view every tensor in place.
    order = sorted(tensors, key=lambda t: -t.width)
    header, placed, offset = {"__metadata__": file_metadata}, [], 0
    for t in order:
        header[t.name] = {"dtype": t.dtype, "shape": t.shape,
                          "data_offsets": [offset, offset + t.nbytes]}
        placed.append((t, offset))
        offset += t.nbytes
    text = json.dumps(header, ensure_ascii=False,
                      separators=(",", ":")).encode("utf-8")
    # Spaces, which JSON ignores, pad the header so the data starts at a
    # multiple of 8.
    text += b" " * (-len(text) % 8)
    if len(text) > _MAX_HEADER:
        raise _errors.InvalidArgument(
            f"{what}: {path}: the safetensors header would take {len(text)} "
            f"bytes, more than readers accept ({_MAX_HEADER}); a smaller "
            f"max_shard_size spreads the tensors over more files")
    return struct.pack("<Q", len(text)) + text, placed


def _write_shard(mgr, step, path, header, what):
    """Writes one safetensors file at `path` (a new temporary name): the
    header, then the tensors, read by one load_into straight into the
    mapped file."""
    head, placed = header
    size = len(head) + sum(t.nbytes for t, _ in placed)
    fd = _create(path, what)
    try:
        # Blocks allocated now: a full disk is an error here, not a SIGBUS
        # when a page of the mapping is first written.
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
            os.ftruncate(fd, size)
        mm = np.memmap(path, dtype=np.uint8, mode="r+", shape=(size,))
        mm[:len(head)] = np.frombuffer(head, dtype=np.uint8)
        start, state = len(head), {}
        for t, offset in placed:
            raw = mm[start + offset:start + offset + t.nbytes]
            # Raw bits for dtypes NumPy lacks (BF16 as uint16, F8 as uint8):
            # load_into passes the stored dtype for an integer array as wide.
            state[t.entry] = raw.view(_dtypes._NUMPY_NAMES[t.dtype]).reshape(
                t.shape)
        try:
            mgr.load_into(state, step)
        except _errors.Error as e:
            raise type(e)(f"{what}: writing {path}: {e}") from e
        mm.flush()
        os.fsync(fd)
    except OSError as e:
        raise _errors.IOError(
            f"{what}: writing {path}: {e.strerror or e}") from e
    finally:
        os.close(fd)


def _write_bytes(path, data, what):
    fd = _create(path, what)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except OSError as e:
        raise _errors.IOError(
            f"{what}: writing {path}: {e.strerror or e}") from e
    finally:
        os.close(fd)


def _temp_path(path):
    # The temporary-name convention of ckpt's file:// backend
    # (docs/format.md): `ckpt gc` and people recognize the leftovers of a
    # crash.
    return f"{path}.ckpt-tmp-{secrets.token_hex(8)}"


def _create(path, what):
    return _io(os.open, path,
               os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666,
               what=f"{what}: creating {path}")


def _place(tmp, path, overwrite, what):
    if overwrite:
        _io(os.replace, tmp, path, what=f"{what}: renaming {tmp} to {path}")
        return
    # A link fails if `path` appeared since the check: never clobbered.
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise _errors.AlreadyExists(
            f"{what}: {path} exists (overwrite=True replaces it)") from None
    except OSError:
        # A file system without hard links.
        if os.path.lexists(path):
            raise _errors.AlreadyExists(
                f"{what}: {path} exists (overwrite=True replaces it)"
            ) from None
        _io(os.rename, tmp, path, what=f"{what}: renaming {tmp} to {path}")
        return
    # `path` is in place: the second name is only a leftover now.
    _remove_quietly(tmp)


def _make_dir(path, what):
    """Creates `path` if missing; whether it did."""
    if os.path.isdir(path):
        return False
    if os.path.lexists(path):
        raise _errors.InvalidArgument(f"{what}: {path} is not a directory")
    _io(os.makedirs, path, exist_ok=True, what=f"{what}: creating {path}")
    return True


def _fsync_dir(path, what):
    fd = _io(os.open, path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC,
             what=f"{what}: opening {path}")
    try:
        _io(os.fsync, fd, what=f"{what}: fsync of {path}")
    finally:
        os.close(fd)


def _io(fn, *args, what, **kwargs):
    try:
        return fn(*args, **kwargs)
    except OSError as e:
        raise _errors.IOError(f"{what}: {e.strerror or e}") from e


def _remove_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass
