"""The library's manager handle (ckpt_manager_t) and its options: what
CheckpointManager (_manager.py) drives.
"""

import ctypes

from ckpt._catalog import Catalog
from ckpt._communicator import Communicator
from ckpt._dtypes import _NUMPY_TYPES, _np
from ckpt._errors import _CODES, Aborted, Error, InvalidArgument
from ckpt import _option_names
from ckpt._lib import _Owned, _call, _encode, _lib, _make, _streamed
from ckpt._pending_saves import TrackedSave
from ckpt._records import (CheckpointDescription, CheckpointInfo,
                           SaveResult)
from ckpt._save_options import _SaveOptions, _step
from ckpt._state import (_KIND_NAMES, _KINDS, _State, _target, gc_paused,
                         new_tensor)


def _option_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


# The options whose value is text; every other is a number or a bool, and
# a str given for one ("2" for keep_last) is a mistake said at once.
_TEXT_OPTIONS = frozenset({"job_id", "best_metric", "metadata_layout",
                           "compression"})


def _set_options(opts, catalog, catalog_required, communicator, options):
    for name, value in options.items():
        if name not in _TEXT_OPTIONS and isinstance(value, (str, bytes)):
            raise TypeError(f"option {name} must be a number, not "
                            f"{type(value).__name__} ({value!r})")
        _call(_lib.ckpt_options_set, opts, name.encode(),
              _encode(_option_text(value), f"option {name}"))
    if isinstance(catalog, Catalog):
        _lib.ckpt_options_set_catalog(opts, catalog._handle())
    elif catalog is not None:
        _call(_lib.ckpt_options_set, opts, b"catalog",
              _encode(catalog, "catalog URL"))
        _call(_lib.ckpt_options_set, opts, b"catalog_required",
              _option_text(bool(catalog_required)).encode())
    if communicator is not None:
        if not isinstance(communicator, Communicator):
            raise TypeError("communicator must be a ckpt.Communicator")
        _lib.ckpt_options_set_communicator(opts, communicator._handle())


class Manager(_Owned):
    """ckpt_manager_t: what CheckpointManager (_manager.py) drives."""

    _free = "ckpt_manager_close"

    def __init__(self, url, *, catalog=None, catalog_required=False,
                 communicator=None, **options):
        super().__init__(None)
        opts = _lib.ckpt_options_create()
        try:
            # Each value is checked here, before the library opens the
            # root; an error of one names the open call it refuses (a job
            # that opens several roots learns which).
            try:
                _set_options(opts, catalog, catalog_required, communicator,
                             options)
            except (TypeError, InvalidArgument) as e:
                raise _option_names.refused(url, e) from None
            self._h = _make(_lib.ckpt_manager_open,
                            _encode(url, "root URL"), opts)
        finally:
            _lib.ckpt_options_destroy(opts)

    @property
    def url(self):
        return _lib.ckpt_manager_url(self._handle()).decode()

    @property
    def rank(self):
        return _lib.ckpt_manager_rank(self._handle())

    @property
    def world_size(self):
        return _lib.ckpt_manager_world_size(self._handle())

    def save(self, step, entries, epoch, metrics, metadata, incremental,
             dirty_rows, compression=None):
        with gc_paused():
            state = self._state_to_save(entries)
        options = _SaveOptions(epoch, metrics, metadata, incremental,
                               dirty_rows, compression)
        return SaveResult(_call(_lib.ckpt_manager_save, self._handle(),
                                _step(step), state._h, options._h, out=True))

    def save_async(self, step, entries, epoch, metrics, metadata, incremental,
                   dirty_rows, stage_in_background=False, compression=None):
        # The library has copied the state by the time it returns, and the
        # arrays are the caller's again, unless the copy runs in the
        # background: then the handle keeps `state` until it is done.
        with gc_paused():
            state = self._state_to_save(entries)
        options = _SaveOptions(epoch, metrics, metadata, incremental,
                               dirty_rows, compression)
        _lib.ckpt_save_options_set_stage_in_background(
            options._h, 1 if stage_in_background else 0)
        h = _lib.ckpt_manager_save_async(self._handle(), _step(step),
                                         state._h, options._h)
        if not h:
            raise MemoryError("ckpt: cannot start an asynchronous save")
        return TrackedSave(h, self,
                           state if stage_in_background else None)

    def _state_to_save(self, entries):
        """The state of `entries`, or, when they are an exception (what
        the caller found wrong before the library saw them) or the library
        refuses one, a state failed with that error. With many ranks the
        save then still takes part in the collectives, so that every rank
        fails with this rank's error instead of waiting for it; alone, the
        error is raised at once."""
        error = entries if isinstance(entries, BaseException) else None
        if error is None:
            try:
                return _State(entries)
            except Exception as e:  # noqa: BLE001 - reported to every rank
                error = e
        if self.world_size == 1:
            raise error
        code = next((c for c in range(1, len(_CODES))
                     if isinstance(error, _CODES[c])), _CODES.index(Aborted))
        message = str(error) if isinstance(error, Error) else \
            f"{type(error).__name__}: {error}"
        state = _State()
        _call(_lib.ckpt_state_set_error, state._h, code,
              message.encode("utf-8", "replace").replace(b"\0", b" "))
        return state

    def describe(self, step, internal=True):
        """internal=False leaves out the entries the package keeps for
        itself, as `ckpt show` does."""
        return CheckpointDescription(_call(
            _lib.ckpt_manager_describe, self._handle(), _step(step),
            out=True), internal)

    def load(self, step, new_device_tensor=None):
        """(info, [(name, kind, dtype, value)], {names left out}).
        new_device_tensor(name, dtype, shape), when given, makes each tensor
        to load into (a _device.DeviceArray), in place of host arrays."""
        with gc_paused():
            step, kept, omitted, arrays, state = self._load_targets(
                step, new_device_tensor)
        # The arrays are new: the library need not stage them first.
        info = CheckpointInfo(_streamed(_lib.ckpt_manager_load_ex,
                                        self._handle(), step, state._h, 0))
        with gc_paused():
            out = []
            for i, (name, kind, dtype) in enumerate(kept):
                value = arrays[i] if kind == "tensor" else state.bytes_of(i)
                out.append((name, kind, dtype, value))
        return info, out, omitted

    def _load_targets(self, step, new_device_tensor):
        """(step, [(name, kind, dtype)] kept, {names left out}, arrays,
        state) of a load: the entries to ask for and where they go."""
        # The description as columns, not an object per entry, and no
        # EntryInfo either: for 10,000 entries either would cost more than
        # the load of their bytes.
        desc = _call(_lib.ckpt_manager_describe_columns, self._handle(),
                     _step(step), out=True)
        same_world = desc["info"]["world_size"] == self.world_size
        rank = self.rank
        # Whole tensors of the job into fresh NumPy arrays, the common case,
        # go to the library in runs, straight from the columns (names,
        # dtypes, shapes) with only each array's address added; the rest
        # (blobs, metadata, rank-local values, device targets, no NumPy)
        # through _State's checks.
        fast = new_device_tensor is None and _np is not None
        state = _State()
        kept, omitted, entries, arrays = [], set(), [], []
        run = []  # (column index, shape, array) of the current run of them
        shapes, dim = desc["shapes"], 0

        def flush():
            if entries:
                state._add(entries, True)
                entries.clear()
            if run:
                state._add_targets(desc, run)
                run.clear()

        name = dtype = shape = None
        try:
            for i, (name, owner, kind, dtype, ndim) in enumerate(zip(
                    desc["names"], desc["owners"], desc["kinds"],
                    desc["dtypes"], desc["ndims"])):
                shape = shapes[dim:dim + ndim]
                dim += ndim
                if not (owner < 0 or (same_world and owner == rank)):
                    omitted.add(name)
                    continue
                kept.append((name, kind, dtype))
                if fast and kind == "tensor" and owner < 0:
                    if entries:
                        flush()
                    array = _np.empty(shape, _NUMPY_TYPES[dtype])
                    arrays.append(array)
                    run.append((i, shape, array))
                    continue
                if run:
                    flush()
                place = None if owner < 0 else ("local",)
                if kind == "tensor" and new_device_tensor is not None:
                    array = new_device_tensor(name, dtype, shape)
                    arrays.append(array.owner)
                    entries.append((name, "tensor", array, dtype, place))
                elif kind == "tensor":
                    array = new_tensor(dtype, shape)
                    arrays.append(array)
                    entries.append((name, "tensor",
                                    _target(array, dtype, shape), dtype,
                                    place))
                else:
                    arrays.append(None)
                    entries.append((name, kind, None, None, place))
        except ValueError as e:
            # NumPy cannot make every shape the format allows: [0, 2**62]
            # holds no byte, but its size overflows NumPy's.
            raise InvalidArgument(
                f"load step {desc['info']['step']} of {self.url}: entry "
                f"{name!r} ({dtype} {list(shape)}) cannot be made here: "
                f"{e}") from None
        flush()
        return desc["info"]["step"], kept, omitted, arrays, state

    def load_into(self, step, entries, strict, transactional=False):
        """Fills the arrays of `entries` in place; (info, [(name, kind,
        value)]) for its blobs and metadata. transactional=False streams:
        where the package makes a load all-or-nothing itself (it reads into
        new memory, _manager.py), staging it in the library as well would
        hold a third copy; True: the library's all-or-nothing load."""
        state = _State(entries, for_load=True)
        args = (_lib.ckpt_manager_load_ex, self._handle(), _step(step),
                state._h, 1 if strict else 0)
        info = CheckpointInfo(_call(*args, 1, out=True) if transactional
                              else _streamed(*args))
        out = []
        for i, item in enumerate(entries):
            if item[1] != "tensor":
                out.append((item[0], item[1], state.bytes_of(i)))
        return info, out

    def load_rank_local(self, step, name):
        """(info, [(rank, kind, dtype, value)])."""
        h = ctypes.c_void_p()
        info = CheckpointInfo(_call(
            _lib.ckpt_manager_load_rank_local, self._handle(), _step(step),
            _encode(name, "entry name"), ctypes.byref(h), out=True))
        state = _State(handle=h.value)
        out = []
        for i in range(len(state)):
            e = state.get(i)
            rank = int(e.name.decode())
            if e.kind == _KINDS["tensor"]:
                dtype = e.dtype.decode()
                shape = [e.shape[d] for d in range(e.ndim)]
                array = new_tensor(dtype, shape)
                if e.nbytes:
                    dst = (array.__array_interface__["data"][0]
                           if _np is not None else
                           ctypes.addressof(ctypes.c_char.from_buffer(array)))
                    ctypes.memmove(dst, e.data, e.nbytes)
                out.append((rank, "tensor", dtype, array))
            else:
                out.append((rank, _KIND_NAMES[e.kind], "U8",
                            state.bytes_of(i)))
        return info, out

    def latest(self):
        step = ctypes.c_int64()
        _call(_lib.ckpt_manager_latest, self._handle(), ctypes.byref(step))
        return None if step.value < 0 else step.value

    def list(self):
        return [CheckpointInfo(i) for i in _call(
            _lib.ckpt_manager_list, self._handle(), out=True)]

    def delete(self, step, rewrite_dependants=False, dry_run=False):
        return _call(_lib.ckpt_manager_delete_report, self._handle(),
                     _step(step), 1 if rewrite_dependants else 0,
                     1 if dry_run else 0, out=True)

    def verify(self, step):
        return _call(_lib.ckpt_manager_verify, self._handle(), _step(step),
                     out=True)

    def gc(self, dry_run=False):
        return _call(_lib.ckpt_manager_gc, self._handle(),
                     1 if dry_run else 0, out=True)
