"""CheckpointManager: the Python face of ckpt::CheckpointManager."""

import json
import os
import warnings
import weakref
from collections.abc import Mapping

from ckpt import (_device, _errors, _manager_handle, _option_names, _resume,
                  _roots, _state, _tree, _values, _writers)
from ckpt._fill import stage_into
from ckpt._load_memory import LoadMemory
from ckpt._pending_saves import PendingSaves, report_unclosed
from ckpt._save_options import (carried, compression_arguments,
                                 metric_name, metric_value, name_the_save,
                                 save_compression)
from ckpt._tiers import Tiers


class CheckpointManager:
    """Saves and loads the checkpoints under one root.

    `url` is a file:// URL (percent-encoded, as Path.as_uri() writes
    it), a plain path (taken as it is), an s3://BUCKET/PREFIX URL (the
    endpoint, region and credentials come from the AWS_* environment
    variables: docs/s3.md), or mem://NAME (in-process, for tests).
    Retention (every rule is off by default, and then nothing is ever
    deleted; with any rule on, a checkpoint is deleted once no rule keeps it,
    and the newest is always kept):

      keep_last              keep the newest N
      keep_every_n_steps     keep every step that is a multiple of K
      keep_every_seconds     keep the first checkpoint of each S-second window
      keep_best, best_metric, best_higher_is_better
                             keep the M best by a metric passed to save()
                             (lower is better unless best_higher_is_better);
                             while no checkpoint has the metric, nothing is
                             deleted, with one warning (a misspelling)

    Other options: min_seconds_between_saves (a save sooner than that after
    the previous one is skipped: SaveResult.skipped), job_id (recorded in
    manifests; default the URL), gc_after_save (remove dead attempts'
    objects after every save), gc_grace_seconds, create (below), chunk_size (bytes per checksummed chunk),
    metadata_layout ("indexed", the default: a small commit record, a
    directory and a binary index per rank, so a loading rank reads only
    what it loads; "json": one JSON manifest, for readers that predate
    manifest version 3; any layout loads whatever this says),
    compression ("off", the default; "zstd": each chunk of a tensor split
    into byte planes of its element and compressed with zstd at
    compression_level, -7 to 19, default 1, stored raw where that does not
    shrink it; "auto": zstd where the storage is slower than compressing
    makes up for, as measured by this manager's saves; loads read every
    chunk whatever this says),
    async_staging_bytes (the most staging memory the manager keeps, for
    save_async's copy of the state and the reads of all-or-nothing loads;
    0: as much as the state needs; a bigger state is saved synchronously,
    and loaded by checking chunks in place or, where the storage cannot
    hand them over, through memory unmapped after the load), async_staging_prepare_bytes (staging memory mapped and
    faulted in on a background thread at open, so the first save_async
    stalls about as briefly as the later ones, and a resume's first
    load_into reads into memory already faulted in: give the state's size).
    Incremental saves (save(..., incremental=True)) write a
    full checkpoint instead every full_every-th save of a chain, after
    max_chain incremental ones in a row, or when less than
    min_referenced_fraction of the state is unchanged (0: rule off).

    catalog: where every committed checkpoint is recorded (the C++
    library's catalog, which `ckpt catalog` reads): a ckpt.Catalog, a URL
    (sqlite:///path, a plain path, postgresql://...), or True for the
    default catalog ($CKPT_CATALOG, else
    ${XDG_STATE_HOME:-~/.local/state}/ckpt/catalog.sqlite).
    Default None: no catalog. A catalog failure never fails a save (the
    commit stands; the next save or `ckpt catalog sync` repairs the
    catalog), and a catalog URL that cannot be opened (unreachable, locked,
    damaged) is one warning on stderr: the job saves and resumes from
    storage alone. catalog_required=True makes it an error instead (a wrong
    URL, e.g. an unknown scheme, always is).

    lease_seconds, lease_wait_seconds, break_lease: one process writes a
    root at a time (default lease_seconds=60; 0 turns ownership off, and
    one writer per root is then the caller's promise). The first save, delete() or gc() takes the root's lease
    (an object LEASE-<n> in the root), which the manager renews while it
    lives and gives back when it is closed (close(), the end of a with
    block) or destroyed (del, or the end of the process; a killed process's
    lease expires, at once for a restart on the same host); the lease is
    the manager's own, so that another manager of the same process waits
    for it as another process would. A save whose lease was taken over
    commits nothing. Finding the lease held by another live process, the
    manager waits up to lease_wait_seconds (default lease_seconds + 10,
    enough for the lease of a crashed job to expire), then raises
    ckpt.FailedPrecondition naming the holder (job, host, pid, since when).
    break_lease=True takes it anyway, for a holder known dead. Loads never
    take the lease.

    create: what happens to a root that does not exist. By default
    (None) the first save creates it, and until then reading it (latest(),
    list(), load(), describe()) raises ckpt.NotFound naming the path, so
    that a mistyped path is an error, not an empty job; an s3:// root
    whose prefix holds nothing is missing too, mem:// is opened as it
    is. create=True creates it
    at once: the first run of a job, whose latest() is then None.
    create=False never creates it: opening a missing root raises
    ckpt.NotFound (for read-only tools).

    communicator: the ranks of a many-rank job, e.g.
    ckpt.mpi_communicator() under mpirun. Every rank opens the same root
    with the same communicator and calls save() and load() together; a
    whole array that several ranks pass is written once, ckpt.Shard marks
    one rank's box of a sharded tensor, ckpt.RankLocal a value of this rank
    alone. Default None: one process.

    Errors raise ckpt.Error subclasses (ckpt.NotFound, ckpt.DataLoss, ...)
    with the library's message. The GIL is released while the library reads
    and writes. Calls on one manager are serialized.

    close() (or the end of a with block: `with ckpt.open(url) as mgr:`)
    waits for the saves in flight and gives the root's lease back at once;
    every call of a closed manager raises ckpt.FailedPrecondition.
    """

    def __init__(self, url, *, keep_last=0, keep_every_n_steps=0,
                 keep_every_seconds=0, keep_best=0, best_metric="",
                 best_higher_is_better=False, min_seconds_between_saves=0.0,
                 job_id="", gc_after_save=True, gc_grace_seconds=3600,
                 create=None, chunk_size=4 << 20, async_staging_bytes=0,
                 async_staging_prepare_bytes=0, full_every=0, max_chain=0, min_referenced_fraction=0.0,
                 catalog=None, catalog_required=False,
                 lease_seconds=60.0, lease_wait_seconds=-1.0,
                 break_lease=False, metadata_layout="indexed",
                 compression="off", compression_level=1,
                 communicator=None):
        if catalog is True:
            catalog = "default"
        elif catalog is False:
            catalog = None
        elif isinstance(catalog, os.PathLike):
            catalog = os.fspath(catalog)
        url = os.fspath(url)
        try:
            compression = compression_arguments(compression,
                                                compression_level)[0]
        except (TypeError, _errors.InvalidArgument) as e:
            raise _option_names.refused(url, e) from None
        options = dict(
            keep_last=keep_last, keep_every_n_steps=keep_every_n_steps,
            keep_every_seconds=keep_every_seconds, keep_best=keep_best,
            best_metric=best_metric,
            best_higher_is_better=best_higher_is_better,
            min_seconds_between_saves=min_seconds_between_saves,
            job_id=job_id, gc_after_save=gc_after_save,
            gc_grace_seconds=gc_grace_seconds,
            chunk_size=chunk_size, async_staging_bytes=async_staging_bytes,
            async_staging_prepare_bytes=async_staging_prepare_bytes,
            full_every=full_every, max_chain=max_chain,
            min_referenced_fraction=min_referenced_fraction,
            catalog=catalog, catalog_required=catalog_required,
            lease_seconds=lease_seconds,
            lease_wait_seconds=lease_wait_seconds, break_lease=break_lease,
            metadata_layout=metadata_layout,
            compression=compression, compression_level=compression_level,
            communicator=communicator)
        self._url = url
        # The library creates nothing at open: a local root that does not
        # exist, opened with the default create=None, is made by the first
        # save and is, until then, an error to read (a mistyped path is no
        # new job). Opening now still checks every option (a bad catalog).
        self._missing = _roots.missing(url, probe=False) if create is None \
            else None
        self._options = options
        self._library = None  # closed, until the library's manager opens
        self._library = _manager_handle.Manager(
            url, create=create is not False, create_root=create is True,
            **options)
        # What a closed manager still tells.
        self._facts = (self._library.url, self._library.rank,
                       self._library.world_size)
        self._pending = PendingSaves()
        self._unclosed = weakref.finalize(self, report_unclosed,
                                          self._pending, self._facts[0])
        self._tiers = weakref.WeakSet()
        # Kept between all-or-nothing loads into new tensors, until a save.
        self._load_memory = LoadMemory(async_staging_bytes)

    def _create_root(self):
        """Creates the root now if it is still missing (create=True of a
        manager opened without it): ckpt.torch.latest(root, create=True)."""
        if self._missing is not None and _roots.is_store(self._url):
            self._missing = None  # a store's prefix is made by its first save
        elif self._missing is not None and _roots.missing(self._url):
            self._m.close()  # no save yet, so no lease to hand back
            self._library = _manager_handle.Manager(
                self._url, create=True, create_root=True, **self._options)

    @property
    def _m(self):
        """The library's manager; FailedPrecondition once closed."""
        if self._library is None:
            raise _errors.FailedPrecondition(
                f"the manager of {self.url} is closed (close() or the end "
                f"of its with block): open the root again to use it")
        return self._library

    @property
    def closed(self):
        """True once close() has run."""
        return self._library is None

    def close(self):
        """Waits for the saves in flight (save_async), closes the tiers
        made by tiers(), and gives the root's lease back at once, so that
        another manager (of this process or another) may write the root
        now. Every later call of this manager raises
        ckpt.FailedPrecondition; close() again does nothing. Raises, once
        closed, the first error of a save_async that no wait() raised (nor
        a later save carried), so that closing loses no failure."""
        if self._library is None:
            return
        self._unclosed.detach()
        try:
            for tiers in list(self._tiers):
                tiers.close()  # they use the library's manager
            unseen = self._pending.finish()
        finally:
            self._load_memory.drop()
            library, self._library = self._library, None
            library.close()
        if unseen is not None:
            raise unseen

    def wait(self):
        """Waits for every save_async of this manager since the last
        wait() and raises the first failure among them (ckpt.Error, as
        handle.wait() would) that was not raised already, by its
        handle.wait() or by a later save; None when all committed."""
        self._m  # noqa: B018 - FailedPrecondition once closed
        self._pending.wait()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None:
            self.close()
            return
        # The block's error goes on; a failed save must not replace it.
        try:
            self.close()
        except _errors.Error as e:
            warnings.warn(f"closing the manager of {self.url} after an "
                          f"error: {e}", RuntimeWarning, stacklevel=2)

    @property
    def _reader(self):
        """The library's manager, for calls that read: NotFound naming the
        path while the root does not exist."""
        self._m  # noqa: B018 - FailedPrecondition once closed
        if self._missing is not None and _roots.missing(self._url):
            raise _errors.NotFound(
                f"root {self._missing} does not exist: nothing was saved "
                f"there (check the path; a save creates it, or open with "
                f"create=True to start a new job)")
        if self._missing is not None and _roots.is_store(self._url):
            self._missing = None  # there: no need to look again
        return self._m

    @property
    def url(self):
        return self._facts[0]

    @property
    def rank(self):
        """This process's rank (0 without a communicator)."""
        return self._facts[1]

    @property
    def world_size(self):
        """The number of ranks (1 without a communicator)."""
        return self._facts[2]

    def __repr__(self):
        closed = ", closed" if self._library is None else ""
        return f"ckpt.CheckpointManager({self.url!r}{closed})"

    def save(self, step, state, metadata=None, epoch=None, metrics=None, *,
             incremental=False, dirty_rows=None, compression=None):
        """Saves `state` as `step` and returns a SaveResult.

        `state` is a dict of NumPy arrays, CPU torch tensors, bytes, int,
        float, str, bool, None, ckpt.Metadata, and dicts, lists and tuples
        of these (see the package docstring). Arrays are read in place, not
        copied. `metadata` (str -> str), `epoch` and `metrics` (str ->
        float, used by keep_best) go into the manifest. Raises
        ckpt.AlreadyExists if `step` is committed and loads whole; a
        committed step that does not (damaged: load() skipped it) is
        replaced in one atomic commit, with a warning on stderr, and the
        result's `replaced` says so (only the holder of the root's lease
        replaces: with lease_seconds=0 it is AlreadyExists); so is one
        whose data files' safetensors headers alone are damaged, which
        load() does not read but other safetensors readers do.

        incremental=True writes only the chunks that differ from the newest
        committed checkpoint and references the others (the new checkpoint
        then depends on it; retention keeps what a kept checkpoint depends
        on). dirty_rows maps a tensor's dotted name to the [first, end) row
        ranges (of dimension 0) that may have changed since this manager's
        previous save: its other rows are referenced without being hashed.

        compression ("off", "zstd", "auto", or a (mode, level) pair) is
        this save's, instead of the manager's.
        """
        library = self._m  # FailedPrecondition once closed
        _writers.warn_before_save(self, step)
        try:
            with _state.gc_paused():
                arguments = self._save_arguments(
                    state, metadata, epoch, metrics, incremental, dirty_rows)
            result = library.save(step, *arguments,
                                  compression=save_compression(compression))
        except _errors.Error as e:
            if carried(e):  # raised now: close() and wait() must not again
                self._pending.settled()
            name_the_save(e, step, self.url)
            _writers.explain(e, self)
            raise
        _writers.wrote(self)
        self._pending.settled()
        return result

    def save_async(self, step, state, metadata=None, epoch=None,
                   metrics=None, *, incremental=False, dirty_rows=None,
                   stage_in_background=False, compression=None):
        """Starts saving `state` as `step` and returns a handle.

        The library copies the arrays into staging memory it keeps for the
        next saves too, and returns: the caller may change its arrays and
        tensors at once, while the checkpoint is written and committed in
        the background. handle.wait() blocks until the save has committed
        and returns its SaveResult (or raises its error); handle.done()
        says whether it has. One save is in flight at a time: every other
        call of this manager (save, save_async, load, list, ...) first
        waits for it. A background error is raised once: by wait(), or,
        when nothing waited for it, by the next save, which then saves
        nothing and says so, so that no failure goes unseen; the next
        save_async then saves nothing either, its handle ending with that
        error (naming the steps not saved), and so does every later one
        until a wait() (of a handle, or mgr.wait()) or close() raises it.
        A state larger than async_staging_bytes is saved synchronously.

        stage_in_background=True returns before the copy, which the
        library then makes on its own thread (CUDA tensors on its own
        streams), so that it overlaps the next forward and backward pass:
        the arrays must not change until handle.wait_staged() returns
        (call it before the optimizer step).

        mgr.wait() waits for every save_async since the last mgr.wait(),
        and close() for those in flight.
        """
        library = self._m  # FailedPrecondition once closed
        _writers.warn_before_save(self, step)
        try:
            with _state.gc_paused():
                arguments = self._save_arguments(
                    state, metadata, epoch, metrics, incremental, dirty_rows)
            handle = library.save_async(
                step, *arguments, stage_in_background=stage_in_background,
                compression=save_compression(compression))
        except _errors.Error as e:
            name_the_save(e, step, self.url)
            _writers.explain(e, self)
            raise
        _writers.wrote(self)
        self._pending.started(handle)
        return handle

    def load(self, step=None, *, as_torch=False, device=None):
        """Loads `step` and returns its state. Default: the newest
        committed step that loads whole (a newer one that does not, being
        damaged, is skipped with a RuntimeWarning; see load_into).
        as_torch=True without PyTorch importable raises ckpt.Unavailable.

        device="cuda:N" (or a torch.device) loads every tensor into a new
        torch tensor on that GPU, straight from the library's page-locked
        memory, ordered on the device's current stream (needs PyTorch with
        CUDA: without, or without that device, ckpt.Unavailable before
        anything is read); device="cpu" is as_torch=True; default: host
        memory.

        Tensors come back as NumPy arrays that own their memory (the bytes
        are read straight into them), or as torch tensors sharing that
        memory with as_torch=True (uint16/32/64 stay NumPy arrays, with a
        warning, where this torch lacks those dtypes). bfloat16 entries come back as
        torch.bfloat16 tensors whenever torch is importable, else as uint16
        arrays of their bits, with a warning. Containers, scalars and bytes
        come back as they were saved. A checkpoint written from C++ comes
        back as nested dicts split at the dots of its entry names, its
        metadata maps as ckpt.Metadata. A sharded tensor (ckpt.Shard) comes
        back whole. A rank-local value (ckpt.RankLocal) comes back
        unwrapped, each rank its own, when the world size is the one that
        saved it; at another world size it is left out (see
        load_rank_local).
        """
        if as_torch:
            _require_torch("load(as_torch=True)")
        new_device_tensor, on_cpu = _device.load_targets(device)
        if on_cpu:  # torch tensors in host memory
            as_torch, device = True, None
        # A step whose damage only the decoding below finds (a metadata
        # entry or the tree that does not decode) is skipped as the
        # library's reads skip one, where this process picks the step.
        skipped = []
        while True:
            info, entries, omitted = self._newest_whole(
                step, "load",
                lambda s: self._reader.load(s, new_device_tensor), skipped)
            # Inline, not a helper: decode_tensor's warnings name the caller
            # of load() by how many frames up it is.
            try:
                with _state.gc_paused():
                    tree, values = None, {}
                    for name, kind, dtype, value in entries:
                        if name == _tree.TREE_ENTRY and kind == "metadata":
                            tree = value
                        elif name in _tree.PACKAGE_ENTRIES:
                            continue  # DCP's planner data: not a value
                        elif kind == "tensor" and device is not None:
                            values[name] = value  # a torch tensor, on device
                        elif kind == "tensor":
                            values[name] = _values.decode_tensor(
                                name, value, dtype, as_torch)
                        elif kind == "blob":
                            values[name] = value
                        else:
                            values[name] = _values.decode_metadata(
                                value, name,
                                f"load step {info.step} in {self.url}")
                    if tree is None:
                        return _tree.unflatten_dotted(values)
                    return _tree.unflatten(
                        tree, values, omitted - set(values),
                        f"load step {info.step} in {self.url}")
            except _errors.DataLoss as e:
                if step is not None or self.world_size > 1:
                    raise
                skipped.append((info.step, e))
                _resume.warn_skipped(
                    f"load of the newest step in {self.url}", info.step, e,
                    stacklevel=2)

    def load_into(self, state, step=None, *, strict=False,
                  transactional=True):
        """Fills `state` in place from `step` (default: the newest that
        loads whole).

        Every array and tensor in `state` receives the bytes of the entry
        of the same name (so a model's parameters are updated through its
        state_dict()); dtype and shape must match. Other values (bytes,
        int, str, ...) are replaced in their dict or list. Entries of the
        checkpoint that `state` lacks are ignored, unless strict=True.
        Returns the CheckpointInfo of the step loaded.

        A load either completes or changes nothing. With
        transactional=True (the default) every entry is checked (name,
        dtype, shape, checksums) before any byte of `state` changes, and
        only once all of it is whole are the bytes copied into `state`'s
        arrays and its other values replaced: a mismatch, a damaged chunk
        (ckpt.DataLoss) or a missing object leaves `state` exactly as it
        was. The chunks are checked where they lie when the checkpoint's
        files are in the page cache (or on tmpfs), else read into the
        manager's staging memory (from a disk with O_DIRECT, at the disk's
        speed): this rank's array bytes, which the manager keeps for later
        loads and save_async (async_staging_bytes bounds it; see
        docs/design.md, "Loading"). transactional=False reads
        straight into the arrays (no extra memory; a non-contiguous target
        still goes through a contiguous copy); then a failed load may have
        written some of them, and its error names the entries it may have
        changed.

        With step=None the newest committed step is loaded; one that does
        not load whole (ckpt.DataLoss: a damaged chunk, a missing object)
        is skipped with a RuntimeWarning naming it and why, and the next
        older one is tried, so that a job resumes from the newest whole
        step. Only when none loads is an error raised, naming every step
        tried. An explicit `step` never falls back, nor does a mismatch
        between `state` and the checkpoint. With many ranks the library
        picks the newest step on every rank alike.
        """
        staged = self._newest_whole(
            step, "load_into",
            lambda s: self._stage_into(state, self._reader.describe(s), strict,
                                       transactional, in_library=True))
        staged.commit()
        return staged.info

    def _stage_into(self, state, desc, strict, transactional,
                    own_memory=frozenset(), in_library=False):
        """Reads step `desc` for `state` (_fill.stage_into)."""
        return stage_into(self._m, self.url, state, desc, strict,
                          transactional, own_memory, in_library,
                          self._load_memory)

    def _newest_whole(self, step, what, attempt, skipped=None):
        """attempt(step), for an explicit step; for step=None, attempt(s)
        for each committed step s from the newest, skipping (with a
        warning) those that raise ckpt.DataLoss, until one succeeds.
        `skipped`: (step, error) of steps skipped already, not tried."""
        if step is not None or self.world_size > 1:
            return attempt(step)
        skipped = [] if skipped is None else skipped
        where = f"{what} of the newest step in {self.url}"
        gone = {s for s, _ in skipped}

        def listed():
            return [i.step for i in self.list() if i.step not in gone]

        steps = listed()
        if not steps and skipped:
            raise _resume.all_damaged(where, skipped)
        if not steps:
            return attempt(None)  # the library's NotFound
        return _resume.first_whole(steps, attempt, where, listed, skipped)

    def tiers(self, local_url, *, local_every=1, durable_every=0, keep=2,
              replicas=None, replication_rate=None, nodes=None):
        """A local tier in front of this manager's root: a Tiers object.

        Every `local_every` steps each rank saves its share of the state
        into `local_url`, a node-local root (file:///dev/shm/run42 is
        memory that outlives the process; "{node}" in it becomes the node's
        index, for several simulated nodes on one machine), and copies it
        to `replicas` ranks on other nodes, so that a node replaced by an
        empty one recovers from its peers; every `durable_every` steps (0:
        only when asked) the same state also goes to this manager's root.
        `keep` marked local steps stay in each folder. replication_rate
        (bytes per second) paces what a rank sends to its peers, so that
        replication leaves the network to training. `nodes` lists each
        rank's node (default: the communicator's host names). Replicas need
        a communicator that sends point to point: ckpt.mpi_communicator()
        or ckpt.torch_communicator(); replicas=0 keeps shares on their own
        node only. The default (None) is what the job's nodes allow: 1 on
        several nodes, 0 on one, with a note in the log (CKPT_LOG=info)
        saying which. docs/tiers.md says what survives which failure.

        Every rank calls it with the same arguments. Save through the Tiers
        object (not this manager) while it is open; close() it (or use it
        in a with block) before the manager goes.
        """
        tiers = Tiers(self, local_url, local_every, durable_every, keep,
                      replicas, replication_rate, nodes)
        self._tiers.add(tiers)  # closed before this manager closes
        return tiers

    def load_rank_local(self, name, step=None, *, as_torch=False):
        """Every saving rank's value of the rank-local entry `name`, as a
        dict {rank: value}, at any world size: how a job resumed on another
        number of ranks merges, say, its data loaders' positions."""
        if as_torch:
            _require_torch("load_rank_local(as_torch=True)")
        _, values = self._reader.load_rank_local(step, name)
        out = {}
        for rank, kind, dtype, value in values:
            out[rank] = (_values.decode_tensor(name, value, dtype, as_torch)
                         if kind == "tensor" else value)
        return out

    def latest(self):
        """The newest committed step whose data objects are all there at
        their recorded sizes (one listing of the root; no data is read),
        or None: the step load() without a step loads, unless reading it
        finds damage (a checksum mismatch), when load() skips it for an
        older one. While every step is whole, the newest in list()."""
        return self._reader.latest()

    def list(self):
        """Every committed checkpoint (CheckpointInfo), oldest first,
        whole or not: `incomplete` names what a step lacks (a missing or
        truncated data object); latest() passes it over, and load() skips
        it with a RuntimeWarning."""
        return self._reader.list()

    def describe(self, step=None, *, internal=False):
        """The entries of `step` (default: the newest): name, kind, dtype,
        shape, bytes; as `ckpt show` lists them, without the entries the
        package keeps for itself (its __python_tree__), unless
        internal=True (`ckpt show --all`)."""
        return self._reader.describe(step, internal)

    def delete(self, step, *, dry_run=False):
        """Deletes the committed checkpoint `step` and returns what it did,
        as a dict: "removed" (each object deleted, {"key", "bytes"}, the
        manifest first; "bytes_freed" their sum), "kept" (objects left in
        the step's directory, each with a "reason": "not_ckpt_object" for a
        file ckpt did not write, "named_by_checkpoint" with the "named_by"
        steps), "skipped" (already gone: "already_gone"),
        "manifest_deleted", "step" and "dry_run". A checkpoint that others
        depend on is refused (ckpt.FailedPrecondition naming them).
        dry_run=True reports the same and deletes nothing."""
        return self._reader.delete(step, dry_run=dry_run)

    def gc(self, *, dry_run=False):
        """Applies the retention policy and removes what dead attempts
        left (objects of saves that never committed, past
        gc_grace_seconds), as each save does with gc_after_save=True and
        `ckpt gc ROOT` does from a shell; returns what `ckpt gc --json`
        prints: {"deleted_steps", "deleted_objects", "bytes_freed",
        "dry_run", "step_reports"} (for each deleted step, newest first,
        what delete() returns of it). dry_run=True deletes nothing and
        reports what it would."""
        return dict(self._reader.gc(dry_run=dry_run), dry_run=dry_run)

    def _save_arguments(self, state, metadata, epoch, metrics, incremental,
                        dirty_rows):
        """The library's save arguments. What is wrong with them raises
        here in a single process; with many ranks it becomes the save's
        error on every rank (the other ranks are in the save already and
        would wait for this one), in place of the entries. `state` may be
        a function that returns the state, so that its errors count too."""
        # A save (of this manager or of its tiers): the loads are over and
        # the job trains on, so the loads' memory goes back.
        self._load_memory.drop()
        try:
            return (self._entries(state() if callable(state) else state),
                    *self._save_options(metadata, epoch, metrics),
                    incremental, self._dirty_rows(dirty_rows))
        except Exception as e:  # noqa: BLE001 - reported to every rank
            if self.world_size == 1:
                raise
            return e, -1, {}, {}, False, {}

    def _entries(self, state):
        leaves, tree = _tree.flatten(state)
        entries = []
        for name, _, leaf in leaves:
            if _values.holds_nothing(leaf):
                continue
            value, place = _values.placement(name, leaf)
            entries.append((name, *_values.encode(name, value), place))
        entries.append((_tree.TREE_ENTRY, "metadata", json.dumps(tree), None,
                        None))
        return entries

    @staticmethod
    def _dirty_rows(dirty_rows):
        if dirty_rows is None:
            return {}
        if not isinstance(dirty_rows, Mapping):
            raise _errors.InvalidArgument(
                "dirty_rows must map tensor names to [(first, end), ...]")
        return {name: [(int(a), int(b)) for a, b in ranges]
                for name, ranges in dirty_rows.items()}

    @staticmethod
    def _save_options(metadata, epoch, metrics):
        metadata = {} if metadata is None else metadata
        metrics = {} if metrics is None else metrics
        if not isinstance(metadata, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str)
                for k, v in metadata.items()):
            raise _errors.InvalidArgument("metadata must map str to str")
        if not isinstance(metrics, Mapping):
            raise _errors.InvalidArgument(
                f"metrics must map str to numbers, not be a "
                f"{type(metrics).__name__}")
        metrics = {metric_name(k): metric_value(k, v)
                   for k, v in metrics.items()}
        texts = [(f"metadata key {k!r}", k) for k in metadata]
        texts += [(f"metadata[{k!r}]", v) for k, v in metadata.items()]
        texts += [(f"metric name {k!r}", k) for k in metrics]
        for what, text in texts:
            problem = _tree.text_problem(text, c_string=True)
            if problem is not None:
                raise _errors.InvalidArgument(f"{what}: {problem}")
        return (-1 if epoch is None else epoch, dict(metrics), dict(metadata))


def _require_torch(call):
    try:
        import torch  # noqa: F401 - only whether it imports
    except ImportError as e:
        raise _errors.Unavailable(
            f"{call} returns torch tensors, but PyTorch is not importable "
            f"({e}); install it, or load without as_torch") from None


def open(url, **options):  # noqa: A001 - ckpt.open, like io.open
    """CheckpointManager(url, **options).

    Opening creates nothing: a local root that does not exist is created by
    the first save, and reading it before (latest(), load(), list())
    raises ckpt.NotFound naming the path. A job's first run, which may
    find the root absent, opens with create=True; then latest() is None.
    A misspelt option is a TypeError naming the nearest one.
    """
    _option_names.check(_option_names.opening(os.fspath(url)), options,
                        CheckpointManager)
    return CheckpointManager(url, **options)
