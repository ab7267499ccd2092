"""How a caller's state receives a checkpoint in place (load_into, and the
tiers' restore): the entries the library fills, and what is handed to the
state once every entry has been read.
"""

from ckpt import _errors, _tree, _values


def _refuse_unwritable(name, value):
    """Refuses, before anything is read, a tensor that torch lets no copy
    write, whose hand-over would fail with the load half done: an
    inference tensor (made under torch.inference_mode()) outside inference
    mode, which torch's own load_state_dict() refuses too."""
    torch = _values._loaded_torch()
    if torch is not None and isinstance(value, torch.Tensor) and \
            value.is_inference() and not torch.is_inference_mode_enabled():
        raise _errors.InvalidArgument(
            f"entry {name!r}: an inference tensor (made under "
            f"torch.inference_mode()), which torch lets nothing write "
            f"outside inference mode; load inside torch.inference_mode(), "
            f"or into a normal tensor (.clone())")


def _fill_targets(state, stored, fresh=False, own_memory=frozenset(),
                  memory=None):
    """How `state` receives a checkpoint: (entries for the library,
    finishers to run after, {name: (path, leaf)} of the values that are
    replaced, [_values.Fresh] to hand over). `stored` maps names to
    EntryInfo where known. fresh=True reads every array into new memory
    (but those whose id() is in `own_memory`), to be copied over later;
    else straight into the arrays. `memory`: the manager's LoadMemory, from
    which the new memory of CPU tensors is lent where it can be."""
    leaves, _ = _tree.flatten(state)
    entries, finishers, paths, handed = [], [], {}, []
    placed = []
    for name, path, leaf in leaves:
        if _values.holds_nothing(leaf):
            continue
        value, place = _values.placement(name, leaf)
        into = (fresh and id(value) not in own_memory
                and not _values.staged_by_library(value))
        placed.append((name, path, leaf, value, place, into))
    lease = None
    if memory is not None:
        sizes = [_values.cpu_tensor_bytes(value)
                 for _, _, _, value, _, into in placed if into]
        lease = memory.lend([n for n in sizes if n])
    for name, path, leaf, value, place, into in placed:
        e = stored.get(name)
        dtype = e.dtype if e is not None and e.kind == "tensor" else None
        scalar = _values.scalar_target(value) if place is None else None
        if scalar is not None:
            # New memory: nothing of the state changes before the finisher.
            entries.append((name, "tensor", scalar, None, place))
            finishers.append(lambda path=path, a=scalar:
                             _tree.assign(state, path, a[()]))
            continue
        if into:
            _refuse_unwritable(name, value)
            target = _values.fresh_target(name, value, dtype, lease)
        else:
            target = _values.fill_target(name, value, dtype)
        if target is None:
            entries.append((name, _values.blob_kind(value), None, None,
                            place))
            paths[name] = (path, leaf)
            continue
        array, dtype, finish = target
        entries.append((name, "tensor", array, dtype, place))
        if finish is not None:
            (handed if into else finishers).append(finish)
    return entries, finishers, paths, handed


def stage_into(m, url, state, desc, strict, transactional,
               own_memory=frozenset(), in_library=False, memory=None):
    """Reads step `desc` for `state` through the manager handle `m` (of
    the root `url`): a _Staged whose commit() hands the bytes to `state`.
    Transactional, nothing of `state` changes before commit(). Targets
    whose id() is in `own_memory` are new memory of the caller's and are
    filled directly. in_library=True (load_into, which commits at once):
    a transactional load is the library's, which checks every chunk in
    its staging memory or in place and then fills the arrays, rather than
    the package reading into new memory and copying (docs/design.md,
    "Loading"); the arrays are then filled when this returns, so what
    could still fail after (a metadata entry that does not decode) is
    checked before."""
    stored = {e.name: e for e in desc.entries}
    step = desc.info.step
    if strict:
        wanted = {name for name, _, _ in _tree.flatten(state)[0]}
        extra = [n for n in stored
                 if n not in wanted and n not in _tree.PACKAGE_ENTRIES]
        if extra:
            raise _errors.InvalidArgument(
                f"strict load of step {step}: the state has no "
                f"entry {extra[0]!r} ({len(extra)} missing)")
    in_library = in_library and transactional
    where = f"load_into step {step} in {url}"
    try:
        entries, finishers, paths, fresh = _fill_targets(
            state, stored, transactional and not in_library, own_memory,
            memory)
    except _errors.InvalidArgument as e:  # a target that cannot take it
        raise _errors.InvalidArgument(
            f"load step {step} from {url}: {e}") from None
    if in_library:
        for name, kind, _, _, _ in entries:
            e = stored.get(name)
            if kind == "metadata" and e is not None and e.kind == kind:
                _values.decode_metadata(e.json, name, where)
    try:
        info, values = m.load_into(step, entries, False, in_library)
        values = _decoded(values, where)
    except _errors.Error as e:
        if transactional:
            raise
        raise _partly_written(e, entries, paths) from None
    return _Staged(info, state, fresh, finishers, paths, values)


def _decoded(values, where):
    """The library's (name, kind, value) of blobs and metadata, metadata
    decoded (which may find it damaged: before anything is handed over)."""
    return [(name, kind, _values.decode_metadata(value, name, where)
             if kind == "metadata" else value)
            for name, kind, value in values]


def _partly_written(error, entries, paths):
    """`error` of a load with transactional=False, naming the entries
    whose arrays it may have written before it failed."""
    names = [e[0] for e in entries if e[1] == "tensor"]
    shown = ", ".join(repr(n) for n in names[:8])
    if len(names) > 8:
        shown += f", ... ({len(names)} in all)"
    told = (f"; with transactional=False the load may have written part of "
            f"the arrays of {shown} before it failed (the state's other "
            f"values were not changed)" if names else
            "; the state was not changed")
    return type(error)(f"{error}{told}")


class _Staged:
    """A load read in whole, not yet handed to the caller's state."""

    def __init__(self, info, state, fresh, finishers, paths, values):
        self.info, self.state, self.fresh = info, state, fresh
        self.finishers, self.paths, self.values = finishers, paths, values

    def commit(self):
        """Copies the loaded arrays into the state's and replaces its
        other values (nothing here fails on a state the load accepted)."""
        for f in self.fresh:
            f.copy()
        self.replace([])

    def swap(self):
        """Exchanges the loaded arrays with the state's: a second call
        puts the state's own bytes back. The second goes in the reverse
        order, so that it undoes the first also where two of the state's
        tensors share memory (tied weights). One that raises (a tensor
        torch lets no copy write) first puts back those it exchanged."""
        scratch, done = {}, []
        try:
            for f in self.fresh:
                f.swap(scratch)
                done.append(f)
        except BaseException:
            for f in reversed(done):
                f.swap(scratch)
            raise
        self.fresh.reverse()

    def replace(self, undo):
        """Runs the finishers and puts the loaded blobs and metadata into
        the state, adding to `undo` how to put back a caller's RankLocal
        value (the state's containers are the caller's to restore)."""
        for finish in self.finishers:
            finish()
        for name, _, value in self.values:
            path, leaf = self.paths[name]
            if isinstance(leaf, _values.RankLocal):
                undo.append(lambda leaf=leaf, old=leaf.value:
                            setattr(leaf, "value", old))
                leaf.value = value
            else:
                _tree.assign(self.state, path, value)


def _finish_fill(state, finishers, paths, values, where):
    _Staged(None, state, [], finishers, paths,
            _decoded(values, where)).replace([])
