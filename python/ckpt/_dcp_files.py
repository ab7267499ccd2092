"""Checkpoints of PyTorch's distributed checkpoint (DCP) file format in and
out of ckpt: `ckpt import-dcp DIR ROOT --step N` and
`ckpt export ROOT --step N --format dcp DIR` (the ckpt tool runs this
module for both), or ckpt.torch.import_dcp / ckpt.torch.export_dcp.

A DCP directory, as DCP's FileSystemWriter writes it at any world size:
`.metadata`, a pickle of DCP's Metadata (each tensor's global shape and
chunks, each chunk's file, offset and length), and `*.distcp` files whose
slices hold each tensor chunk as a torch.save archive and each non-tensor
value as DCP's own bytes.

`.metadata` is read by an unpickler that admits only DCP's metadata
classes, torch.Size, torch's dtypes and layouts, the members of DCP's
memory-format enum and pathlib paths; a pickle naming anything else (a
function, a module, another class) is refused before any of it is built,
so nothing it names is ever called. What it builds is then checked: every
chunk inside its tensor, the chunks tiling the tensor exactly, every
slice inside its file, file names without directories. Tensor slices are
read with torch.load(weights_only=True), which admits tensors only. Bytes
items are kept as the bytes they are, never unpickled here: they become
blob entries, which dcp.load through ckpt.torch.StorageReader hands to
DCP's planner as any storage does.

Import assembles each tensor whole from its chunks (at its peak one
tensor's size twice in memory, and every tensor of the step, since one
ckpt step is one commit) and saves them as one step, as
ckpt.torch.StorageWriter would have: entries named by DCP's fully
qualified names, each tensor whole, each bytes item a blob; DCP's
planner_data (how its flat names map to nested keys) rides along as the
hidden entry `__dcp_planner_data__`. Nothing of ROOT changes unless the
whole directory reads and checks.

Export writes the step's tensor and blob entries (rank-local values, ckpt's
own Python tree and metadata entries have no place in DCP and are named
as left out) into one `__0_0.distcp` file and a `.metadata` that DCP's
FileSystemReader loads at any world size; the data is synced before
`.metadata` appears under its name, so a directory with a `.metadata`
is whole.
"""

import argparse
import enum
import io
import json
import math
import os
import pathlib
import pickle
import pickletools
import reprlib
import stat
import sys

import torch

from ckpt import _dcp_planner, _errors, _manager, _tree, _values
from ckpt._consolidate import _fsync_dir
from ckpt._torch_dcp import _torch_dtype

try:
    from torch.distributed.checkpoint import filesystem as _fs
    from torch.distributed.checkpoint import metadata as _md
    _MISSING = None
except ImportError as _e:  # a PyTorch without DCP
    _fs = _md = None
    _MISSING = f"{type(_e).__name__}: {_e}"

__all__ = ["export_dcp", "import_dcp", "main"]

METADATA_FILE = ".metadata"
DATA_FILE = "__0_0.distcp"

# The classes a DCP .metadata pickle may name, by module.
_DCP_METADATA_CLASSES = ("Metadata", "TensorStorageMetadata",
                         "BytesStorageMetadata", "ChunkStorageMetadata",
                         "TensorProperties", "MetadataIndex", "StorageMeta",
                         "_MEM_FORMAT_ENCODING")
# Export reads the step in batches of about this many bytes.
_EXPORT_BATCH_BYTES = 256 << 20


def _require_dcp(what):
    if _MISSING is not None:
        raise _errors.Unavailable(
            f"{what}: this PyTorch has no torch.distributed.checkpoint "
            f"({_MISSING})")


class _Refused(Exception):
    """A pickle asked for more than DCP's metadata."""


def _enum_member(cls, name):
    """What a pickle's getattr(cls, name) may do: name a member of one of
    DCP's own enums, nothing else."""
    if (isinstance(cls, type) and issubclass(cls, enum.Enum)
            and isinstance(name, str) and name in cls.__members__):
        return cls.__members__[name]
    raise _Refused(
        f"the pickle calls getattr({getattr(cls, '__name__', repr(cls))}, "
        f"{name!r}), which is not a member of one of DCP's enums")


def _layout(name):
    """What a pickle's torch layout (by name, as "torch.strided") may be."""
    value = getattr(torch, str(name).rpartition(".")[2], None)
    if isinstance(value, torch.layout):
        return value
    raise _Refused(f"the pickle names {name!r} as a torch layout")


class _MetadataUnpickler(pickle.Unpickler):
    """An unpickler that builds DCP's metadata and nothing else: every
    global a pickle names goes through find_class, which answers only DCP's
    metadata classes and the plain values they hold."""

    def __init__(self, data):
        super().__init__(io.BytesIO(data))

    def find_class(self, module, name):
        allowed = None
        if module == "torch.distributed.checkpoint.metadata" and \
                name in _DCP_METADATA_CLASSES:
            allowed = getattr(_md, name, None)
        elif module == "torch.distributed.checkpoint.filesystem" and \
                name == "_StorageInfo":
            allowed = getattr(_fs, name, None)
        elif module == "torch" and name == "Size":
            allowed = torch.Size
        elif module == "torch" and isinstance(getattr(torch, name, None),
                                              torch.dtype):
            allowed = getattr(torch, name)
        elif module == "torch.serialization" and name == "_get_layout":
            allowed = _layout
        elif module == "builtins" and name == "getattr":
            allowed = _enum_member
        elif module == "pathlib" and name in ("PosixPath", "PurePosixPath",
                                              "Path"):
            allowed = pathlib.PurePosixPath
        elif module == "collections" and name == "OrderedDict":
            allowed = dict
        if allowed is None:
            raise _Refused(
                f"the pickle names {module}.{name}, which is not one of "
                f"DCP's metadata classes")
        return allowed

    def persistent_load(self, pid):
        raise _Refused("the pickle asks for a persistent object, which "
                       "DCP's metadata never holds")


# Opcodes whose argument is an index into the unpickler's memo.
_MEMO_OPS = {"PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET"}


def _prescan(data):
    """Reads every opcode of `data` without building anything, so that a
    damaged pickle cannot make the unpickler allocate far more than the
    file: a frame must end inside the file (the unpickler allocates a
    frame's forged length before it reads), and a memo index must be below
    the file's size (the memo grows to the index). A length-prefixed
    argument that runs past the end fails here as a short read."""
    size = len(data)
    for op, arg, pos in pickletools.genops(io.BytesIO(data)):
        if op.name == "FRAME" and arg > size - (pos or 0):
            raise ValueError(f"a frame of {arg} bytes at byte {pos} runs "
                             f"past the file's {size} bytes")
        if op.name in _MEMO_OPS and int(arg) > size:
            raise ValueError(f"memo index {arg} at byte {pos} is beyond any "
                             f"pickle of {size} bytes")


def _open_regular(path):
    """`path` opened for reading, if it is a regular file (after links):
    a FIFO or a device in a checkpoint's folder would hold the import for
    ever, or read without end. OSError otherwise, naming what it is."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_metadata(directory):
    """The DCP Metadata of `directory`'s .metadata, by the restricted
    unpickler, checked; raises ckpt errors naming the file."""
    _require_dcp("reading a DCP checkpoint")
    path = os.path.join(directory, METADATA_FILE)
    try:
        with _open_regular(path) as f:
            data = f.read()
    except FileNotFoundError:
        raise _errors.NotFound(
            f"{path}: no such file: {directory} is not a checkpoint written "
            f"by DCP's FileSystemWriter (it has no .metadata)") from None
    except OSError as e:
        raise _errors.Unavailable(f"{path}: cannot read it: {e}") from None
    try:
        _prescan(data)
        metadata = _MetadataUnpickler(data).load()
    except _Refused as e:
        raise _errors.InvalidArgument(
            f"{path}: refused: {e}; nothing of it was run (a .metadata "
            f"written by DCP's FileSystemWriter names only DCP's metadata "
            f"classes, torch sizes, dtypes and layouts)") from None
    except Exception as e:  # noqa: BLE001 - any malformed pickle
        raise _errors.DataLoss(
            f"{path}: not a DCP metadata pickle ({type(e).__name__}: "
            f"{e})") from None
    try:
        _check_metadata(metadata, path)
    except RecursionError:
        raise _errors.DataLoss(
            f"{path}: values nested too deep to be DCP's metadata") from None
    return metadata


_NONE = object()


def _check_metadata(metadata, path):
    """Raises ckpt.DataLoss unless `metadata` is DCP's Metadata with every
    field import reads of the type it must be (a damaged pickle can build
    the classes with fields missing or of any type)."""

    def bad(what):
        return _errors.DataLoss(f"{path}: {what} (a damaged .metadata?)")

    def field(obj, name, types, what):
        value = getattr(obj, name, _NONE)
        if not isinstance(value, types) or isinstance(value, bool):
            raise bad(f"{what} has no valid {name}")
        return value

    if not isinstance(metadata, _md.Metadata):
        raise bad(f"it holds a {type(metadata).__name__}, not DCP's Metadata")
    entries = field(metadata, "state_dict_metadata", dict, "the metadata")
    storage = field(metadata, "storage_data", dict,
                    "the metadata (written by DCP's FileSystemWriter? "
                    "another storage keeps its own storage_data)")
    for fqn, md in entries.items():
        if not isinstance(fqn, str) or not fqn:
            raise bad(f"an entry is named {_shown(fqn)}")
        what = f"entry {fqn!r}"
        if isinstance(md, _md.BytesStorageMetadata):
            continue
        if not isinstance(md, _md.TensorStorageMetadata):
            raise bad(f"{what} is a {type(md).__name__}")
        props = field(md, "properties", _md.TensorProperties, what)
        field(props, "dtype", torch.dtype, what)
        _int_tuple(field(md, "size", (tuple, list), what), f"{what}'s size",
                   path)
        for chunk in field(md, "chunks", (list, tuple), what):
            if not isinstance(chunk, _md.ChunkStorageMetadata):
                raise bad(f"{what} has a chunk that is a "
                          f"{type(chunk).__name__}")
            _int_tuple(field(chunk, "offsets", (tuple, list), what),
                       f"{what}'s chunk offsets", path)
            _int_tuple(field(chunk, "sizes", (tuple, list), what),
                       f"{what}'s chunk sizes", path)
    for index, info in storage.items():
        if not isinstance(index, _md.MetadataIndex) or not isinstance(
                getattr(index, "fqn", None), str):
            raise bad(f"a storage_data key is a {type(index).__name__}")
        what = f"entry {index.fqn!r}'s storage info"
        if not isinstance(info, _fs._StorageInfo):
            raise bad(f"{what} is a {type(info).__name__}")
        field(info, "relative_path", str, what)
        field(info, "offset", int, what)
        field(info, "length", int, what)
        descriptors = getattr(info, "transform_descriptors", None)
        if descriptors is not None and not isinstance(descriptors,
                                                      (list, tuple)):
            raise bad(f"{what} has no valid transform_descriptors")


def _int_tuple(value, what, path):
    if not isinstance(value, (tuple, list)) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for v in value):
        raise _errors.DataLoss(
            f"{path}: {what} is {_shown(value)}, not sizes")
    return tuple(int(v) for v in value)


# How an untrusted value from a .metadata is shown in an error: a few
# levels and items of it (a hostile pickle nests lists as deep as it likes,
# and repr() of that fails).
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 3, 80, 80


def _shown(value):
    return _SHOWN.repr(value)


class _Files:
    """The .distcp files of a directory, opened as they are first needed,
    each slice checked to lie inside its file."""

    def __init__(self, directory):
        self.directory, self._open = directory, {}

    def read(self, info, fqn, path):
        if not isinstance(info, _fs._StorageInfo):
            raise _errors.DataLoss(
                f"{path}: entry {fqn!r} has no storage info in the metadata")
        name = info.relative_path
        if not isinstance(name, str) or not name or "/" in name or \
                name in (".", "..") or "\0" in name:
            raise _errors.DataLoss(
                f"{path}: entry {fqn!r}: its file {_shown(name)} is not a "
                f"file name inside the checkpoint")
        if getattr(info, "transform_descriptors", None):
            raise _errors.FailedPrecondition(
                f"{path}: entry {fqn!r} was written through DCP storage "
                f"extensions {list(info.transform_descriptors)}; import "
                f"reads plain FileSystemWriter output")
        offset, length = info.offset, info.length
        if not all(isinstance(v, int) and v >= 0 for v in (offset, length)):
            raise _errors.DataLoss(
                f"{path}: entry {fqn!r}: offset {_shown(offset)} length "
                f"{_shown(length)}")
        f = self._open.get(name)
        file_path = os.path.join(self.directory, name)
        if f is None:
            try:
                f = self._open[name] = _open_regular(file_path)
            except OSError as e:
                raise _errors.DataLoss(
                    f"{file_path}: entry {fqn!r}: cannot open its file: "
                    f"{e}") from None
        size = os.fstat(f.fileno()).st_size
        if offset + length > size:
            raise _errors.DataLoss(
                f"{file_path}: entry {fqn!r}: bytes {offset}..{offset + length}"
                f" lie beyond the file's end ({size} bytes): truncated")
        f.seek(offset)
        return f.read(length), file_path

    def close(self):
        for f in self._open.values():
            f.close()


def _read_chunk(files, info, fqn, dtype, sizes, path):
    data, file_path = files.read(info, fqn, path)
    try:
        tensor = torch.load(io.BytesIO(data), map_location="cpu",
                            weights_only=True)
    except Exception as e:  # noqa: BLE001 - a damaged or hostile slice
        raise _errors.DataLoss(
            f"{file_path}: entry {fqn!r}: its chunk is not a tensor "
            f"archive ({type(e).__name__}: {e})") from None
    if not isinstance(tensor, torch.Tensor) or tensor.dtype != dtype or \
            tuple(tensor.shape) != sizes:
        got = (f"{tensor.dtype} {list(tensor.shape)}"
               if isinstance(tensor, torch.Tensor) else type(tensor).__name__)
        raise _errors.DataLoss(
            f"{file_path}: entry {fqn!r}: a chunk holds {got}, the metadata "
            f"says {dtype} {list(sizes)}")
    return tensor


def _overlap(a_lo, a_hi, b_lo, b_hi):
    return all(x < q and p < y for x, y, p, q in zip(a_lo, a_hi, b_lo, b_hi))


def _assemble(files, metadata, fqn, md, path):
    """The whole tensor `fqn` from its chunks, which must tile it: checked
    before anything is allocated or read, so that no size in a damaged
    .metadata makes memory be asked for that its files cannot fill."""
    dtype = md.properties.dtype
    shape = _int_tuple(md.size, f"entry {fqn!r}'s size", path)
    numel = math.prod(shape)
    chunks, volume, stored = [], 0, 0
    for i, chunk in enumerate(md.chunks):
        lo = _int_tuple(chunk.offsets, f"entry {fqn!r} chunk {i} offsets",
                        path)
        sizes = _int_tuple(chunk.sizes, f"entry {fqn!r} chunk {i} sizes",
                           path)
        hi = tuple(a + n for a, n in zip(lo, sizes))
        if len(lo) != len(shape) or len(sizes) != len(shape) or any(
                b > d for b, d in zip(hi, shape)):
            raise _errors.DataLoss(
                f"{path}: entry {fqn!r}: chunk {i} at {list(lo)} of sizes "
                f"{list(sizes)} lies outside its shape {list(shape)}")
        if math.prod(sizes) == 0 and numel > 0:
            continue
        for j, (_, blo, bhi, _) in enumerate(chunks):
            if _overlap(lo, hi, blo, bhi):
                raise _errors.DataLoss(
                    f"{path}: entry {fqn!r}: chunks {j} and {i} overlap")
        info = metadata.storage_data.get(
            _md.MetadataIndex(fqn, torch.Size(lo), i))
        if not isinstance(info, _fs._StorageInfo):
            raise _errors.DataLoss(
                f"{path}: entry {fqn!r}: chunk {i} at {list(lo)} has no "
                f"storage info")
        chunks.append((sizes, lo, hi, info))
        volume += math.prod(sizes)
        stored += info.length
    if volume != numel and numel > 0:
        raise _errors.DataLoss(
            f"{path}: entry {fqn!r}: its chunks cover {volume} of its "
            f"{numel} elements")
    itemsize = torch.empty((), dtype=dtype).element_size()
    if numel * itemsize > stored:
        raise _errors.DataLoss(
            f"{path}: entry {fqn!r}: {numel * itemsize} bytes of tensor "
            f"in {stored} bytes of chunks")
    out = torch.empty(shape, dtype=dtype)
    for sizes, lo, _, info in chunks:
        tensor = _read_chunk(files, info, fqn, dtype, sizes, path)
        region = out
        for d, (a, n) in enumerate(zip(lo, sizes)):
            region = region.narrow(d, a, n)
        region.copy_(tensor)
    return out


def import_dcp(directory, root, step, *, epoch=None, catalog=None):
    """Saves DCP checkpoint `directory` as step `step` of ckpt root `root`
    (created if missing) and returns a dict of what it did. Everything is
    read and checked before anything is saved."""
    metadata = read_metadata(directory)
    path = os.path.join(directory, METADATA_FILE)
    files = _Files(directory)
    entries, tensors, blobs, size = [], 0, 0, 0
    try:
        for fqn, md in metadata.state_dict_metadata.items():
            if not isinstance(fqn, str) or not fqn:
                raise _errors.DataLoss(f"{path}: an entry named {_shown(fqn)}")
            if isinstance(md, _md.TensorStorageMetadata):
                value = _assemble(files, metadata, fqn, md, path)
                tensors += 1
                size += value.numel() * value.element_size()
            elif isinstance(md, _md.BytesStorageMetadata):
                value, _ = files.read(metadata.storage_data.get(
                    _md.MetadataIndex(fqn)), fqn, path)
                blobs += 1
                size += len(value)
            else:
                raise _errors.DataLoss(
                    f"{path}: entry {fqn!r} is a {type(md).__name__}")
            entries.append((fqn, *_values.encode(fqn, value), None))
    finally:
        files.close()
    entries += [e for e in [_dcp_planner.entry(
        getattr(metadata, "planner_data", None), {e[0] for e in entries})]
        if e is not None]
    # The save creates a missing root (create's default): an import is meant
    # to start one, so the warning create=True gives a job is not wanted.
    mgr = _manager.CheckpointManager(
        root, **({} if catalog is None else {"catalog": catalog}))
    try:
        mgr._m.save(step, entries, -1 if epoch is None else epoch, {},
                    {"ckpt.imported_from": "dcp"}, False, {})
    finally:
        mgr.close()
    return {"root": mgr.url, "step": step, "tensors": tensors,
            "blobs": blobs, "bytes": size, "from": os.path.abspath(directory)}


def _batches(entries):
    batch, size = [], 0
    for e in entries:
        n = int(e.bytes or 0)
        if batch and size + n > _EXPORT_BATCH_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(e)
        size += n
    if batch:
        yield batch


def export_dcp(root, step, directory, *, force=False):
    """Writes step `step` (None: the newest) of ckpt root `root` as a DCP
    checkpoint in `directory` that DCP's FileSystemReader loads; returns a
    dict of what it did. An existing checkpoint there is kept unless
    `force`."""
    _require_dcp("writing a DCP checkpoint")
    meta_path = os.path.join(directory, METADATA_FILE)
    if os.path.lexists(meta_path) and not force:
        raise _errors.AlreadyExists(
            f"{directory}: holds a DCP checkpoint already (its .metadata); "
            f"give --force (force=True) to replace it")
    mgr = _manager.CheckpointManager(root, create=False)
    try:
        desc = mgr.describe(step, internal=True)
        step = desc.info.step
        where = f"export of step {step} of {mgr.url}"
        wanted, left_out, planner = [], [], None
        for e in desc.entries:
            if e.name == _tree.DCP_PLANNER_ENTRY:
                # A blob where an older `ckpt import-dcp` kept it: read
                # below; the metadata entry is in `desc` itself.
                planner = e if e.kind == "blob" else None
            elif e.owner != -1 or e.name == _tree.TREE_ENTRY:
                left_out.append(e.name)
            elif e.kind == "blob" or (e.kind == "tensor" and _torch_dtype(e)):
                wanted.append(e)
            else:
                left_out.append(e.name)
        os.makedirs(directory, exist_ok=True)
        data_path = os.path.join(directory, DATA_FILE)
        tmp_data = data_path + ".tmp"
        state_md, storage, size = {}, {}, 0
        with open(tmp_data, "wb") as out:
            for batch in _batches(wanted + ([planner] if planner else [])):
                state, own = {}, set()
                for e in batch:
                    if e.kind == "blob":
                        state[e.name] = b""
                    else:
                        t = torch.empty([int(d) for d in e.shape],
                                        dtype=_torch_dtype(e))
                        state[e.name] = t
                        own.add(id(t))
                staged = mgr._stage_into(state, desc, False, True, own)
                staged.commit()
                for e in batch:
                    value = state[e.name]
                    if e is planner:
                        planner = json.loads(bytes(value))
                        continue
                    offset = out.tell()
                    if e.kind == "blob":
                        out.write(bytes(value))
                        state_md[e.name] = _md.BytesStorageMetadata()
                        index = _md.MetadataIndex(e.name)
                    else:
                        torch.save(value, out)
                        shape = torch.Size(value.shape)
                        state_md[e.name] = _md.TensorStorageMetadata(
                            properties=_md.TensorProperties(
                                dtype=value.dtype),
                            size=shape,
                            chunks=[_md.ChunkStorageMetadata(
                                offsets=torch.Size([0] * len(shape)),
                                sizes=shape)])
                        index = _md.MetadataIndex(
                            e.name, torch.Size([0] * len(shape)), 0)
                    storage[index] = _fs._StorageInfo(
                        DATA_FILE, offset, out.tell() - offset)
                    size += out.tell() - offset
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp_data, data_path)
        names = set(state_md)
        planner_data = _dcp_planner.planner_data(desc, names)
        if isinstance(planner, dict):
            planner_data.update({n: tuple(k) for n, k in planner.items()
                                 if n in names})
        metadata = _md.Metadata(
            state_dict_metadata=state_md, planner_data=planner_data,
            storage_data=storage,
            storage_meta=_md.StorageMeta(checkpoint_id=f"{mgr.url}@{step}"))
        tmp_meta = meta_path + ".tmp"
        with open(tmp_meta, "wb") as f:
            pickle.dump(metadata, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_meta, meta_path)
        _fsync_dir(directory, where)
    except OSError as e:
        raise _errors.Unavailable(f"{where}: {e}") from None
    finally:
        mgr.close()
    return {"root": mgr.url, "step": step, "to": os.path.abspath(directory),
            "tensors": sum(1 for e in wanted if e.kind == "tensor"),
            "blobs": sum(1 for e in wanted if e.kind == "blob"),
            "bytes": size, "left_out": left_out}


def main(argv=None):
    """`ckpt import-dcp` and `ckpt export --format dcp`, as the ckpt tool
    runs them: python -m ckpt._dcp_files import|export ARGS."""
    parser = argparse.ArgumentParser(prog="ckpt")
    sub = parser.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import-dcp")
    imp.add_argument("dir")
    imp.add_argument("root")
    imp.add_argument("--step", type=int, required=True)
    imp.add_argument("--epoch", type=int)
    imp.add_argument("--catalog")
    imp.add_argument("--json", action="store_true")
    exp = sub.add_parser("export")
    exp.add_argument("root")
    exp.add_argument("dir")
    exp.add_argument("--step", type=int)
    exp.add_argument("--force", action="store_true")
    exp.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    command = args.command
    try:
        if command == "import-dcp":
            catalog = None if args.catalog in (None, "none") else \
                args.catalog
            done = import_dcp(args.dir, args.root, args.step,
                              epoch=args.epoch, catalog=catalog)
            text = (f"imported {done['from']} as step {done['step']} of "
                    f"{done['root']}: {done['tensors']} tensors, "
                    f"{done['blobs']} blobs, {done['bytes']} bytes")
        else:
            done = export_dcp(args.root, args.step, args.dir,
                              force=args.force)
            text = (f"exported step {done['step']} of {done['root']} to "
                    f"{done['to']} (DCP): {done['tensors']} tensors, "
                    f"{done['blobs']} blobs, {done['bytes']} bytes")
            if done["left_out"]:
                text += (f"; left out {len(done['left_out'])} entries DCP "
                         f"has no place for: "
                         f"{', '.join(done['left_out'][:5])}"
                         f"{' ...' if len(done['left_out']) > 5 else ''}")
    except _errors.Error as e:
        print(f"ckpt {command}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(done, sort_keys=True) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
