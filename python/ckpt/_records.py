"""The library's records, read from the JSON the C API returns
(include/ckpt/c.h lists each object's fields)."""

class _Record:
    """A record the library returned as JSON, as read-only attributes."""

    _fields = ()
    _repr_fields = ()

    def __init__(self, fields):
        for name in self._fields:
            object.__setattr__(self, name, fields.get(name))

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __eq__(self, other):
        return type(self) is type(other) and all(
            getattr(self, f) == getattr(other, f) for f in self._fields)

    __hash__ = None

    def __repr__(self):
        shown = ", ".join(f"{f}={getattr(self, f)!r}"
                          for f in self._repr_fields)
        return f"{type(self).__name__}({shown})"


def is_internal_entry(name):
    """Whether entry `name` is one a binding keeps for itself, named
    __NAME__ (this package's __python_tree__, which rebuilds the state's
    containers): not the user's state, so `ckpt show` lists it only with
    --all, and describe() and CheckpointInfo.num_entries leave it out."""
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


class CheckpointInfo(_Record):
    """A committed checkpoint, as `ckpt ls` shows it: step, epoch (-1 when
    not given), created_unix_ms, job_id, world_size, hosts, bytes (of the
    data objects it wrote), depends_on, referenced_bytes (of earlier
    checkpoints' objects it references), parent (-1 for a full save), chain
    (incremental saves in a row that led to it), metrics, metadata,
    num_entries (the entries saved: what `ckpt show` lists),
    internal_entries (those the package keeps for itself beside them, such
    as its __python_tree__: `ckpt show --all` lists them too), incomplete
    (empty when every data object is present; else what is missing: loads
    and resumes skip the step), timing (None when the save recorded none;
    else a dict: save_ms, commit_ms, stall_ms, async and ranks, a list of
    {rank, write_ms, wait_ms})."""

    _fields = ("step", "epoch", "created_unix_ms", "job_id", "world_size",
               "hosts", "bytes", "depends_on", "referenced_bytes", "parent",
               "chain", "metrics", "metadata", "num_entries",
               "internal_entries", "incomplete", "timing")
    _repr_fields = ("step", "epoch", "bytes", "num_entries")


class SaveResult(_Record):
    """What a save did: skipped (True when min_seconds_between_saves
    skipped it), info (the committed checkpoint), deleted_steps (removed by
    retention after the save), replaced (True when the step was committed
    but damaged, and this save replaced it: it did not load whole, or its
    data files' safetensors headers alone were damaged) and
    replaced_because (what was damaged; "" otherwise)."""

    _fields = ("skipped", "info", "deleted_steps", "replaced",
               "replaced_because")
    _repr_fields = ("skipped", "info")

    def __init__(self, fields):
        super().__init__(fields)
        object.__setattr__(self, "info", CheckpointInfo(fields["info"]))


class TierSaveResult(_Record):
    """What a tiered save did: step, skipped (no tier was due), local (the
    local tier committed it), local_error (why not, when it was due: the
    local tier is a cache, so its failure is not the save's), durable (the
    durable tier committed it), durable_result (its SaveResult, or None),
    local_bytes (this rank's share), replicated_bytes (sent to peers),
    local_seconds, durable_seconds."""

    _fields = ("step", "skipped", "local", "local_error", "durable",
               "durable_result", "local_bytes", "replicated_bytes",
               "local_seconds", "durable_seconds")
    _repr_fields = ("step", "local", "durable")

    def __init__(self, fields):
        super().__init__(fields)
        d = fields.get("durable_result")
        object.__setattr__(self, "durable_result",
                           None if d is None else SaveResult(d))


class TierRestoreResult(_Record):
    """Where a restore came from: tier ('none' on a fresh start, 'local' or
    'durable'), step (-1 for 'none'), info (the CheckpointInfo of what was
    loaded, or None), fetched_bytes (this rank's share fetched from a peer),
    ranks_fetched (ranks whose share came from peers), local_skipped (why
    the local tier was not used, when it held a step), durable_has_step
    (the durable tier lists a committed checkpoint of that step)."""

    _fields = ("tier", "step", "info", "fetched_bytes", "ranks_fetched",
               "local_skipped", "durable_has_step")
    _repr_fields = ("tier", "step", "ranks_fetched")

    def __init__(self, fields):
        super().__init__(fields)
        i = fields.get("info")
        object.__setattr__(self, "info",
                           None if i is None else CheckpointInfo(i))


class EntryInfo(_Record):
    """One entry of a checkpoint: name, owner (the saving rank of a
    rank-local entry; -1 for the job's), kind ('tensor', 'blob' or
    'metadata'), dtype (the safetensors name: 'F32', 'BF16', ...), shape,
    bytes, json (metadata entries: the JSON)."""

    _fields = ("name", "owner", "kind", "dtype", "shape", "num_pieces",
               "bytes", "json")
    _repr_fields = ("name", "kind", "dtype", "shape")

    def __init__(self, fields):
        super().__init__(fields)
        if self.json is None:
            object.__setattr__(self, "json", "")


class CheckpointDescription(_Record):
    """A checkpoint's info and its entries (EntryInfo), as `ckpt show
    --json` lists them: without the internal entries (see CheckpointInfo)
    unless internal=True (`ckpt show --all`), and hidden_internal_entries
    (how many were left out)."""

    _fields = ("info", "entries", "hidden_internal_entries")
    _repr_fields = ("info",)

    def __init__(self, fields, internal=False):
        object.__setattr__(self, "info", CheckpointInfo(fields["info"]))
        entries = [EntryInfo(e) for e in fields["entries"]]
        shown = entries if internal else [
            e for e in entries if not is_internal_entry(e.name)]
        object.__setattr__(self, "entries", shown)
        object.__setattr__(self, "hidden_internal_entries",
                           len(entries) - len(shown))


class CatalogCheckpoint(_Record):
    """One checkpoint's row in the catalog: job_id, root (the root's URL),
    step, epoch (-1 when not given), scheme, world_size, hosts, bytes,
    manifest_checksum, metrics, created_unix_ms, state ('committed' or
    'deleted'), tier ('durable', or 'local': a step of a Tiers' local tier,
    in node memory, that only the job's own Tiers.restore can resume)."""

    _fields = ("job_id", "root", "step", "epoch", "scheme", "world_size",
               "hosts", "bytes", "manifest_checksum", "metrics",
               "created_unix_ms", "state", "tier")
    _repr_fields = ("job_id", "step", "epoch", "state", "tier")


class CatalogJob(_Record):
    """A job the catalog has seen: job_id, root, first_seen_unix_ms,
    last_seen_unix_ms, committed, latest_step (of its durable
    checkpoints)."""

    _fields = ("job_id", "root", "first_seen_unix_ms", "last_seen_unix_ms",
               "committed", "latest_step")
    _repr_fields = ("job_id", "committed", "latest_step")


def row(fields):
    return None if fields is None else CatalogCheckpoint(fields)
