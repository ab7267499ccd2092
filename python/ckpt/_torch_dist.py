"""ckpt.torch_communicator(): the ranks of a torch.distributed job.

A communicator written in Python: a table of ctypes callbacks
(ckpt_communicator_ops_t, include/ckpt/c.h) that run torch.distributed
collectives on a gloo group, handed to ckpt_communicator_create. The
library calls them from the thread that saves or loads (a save_async's
thread too); ctypes takes the GIL for each call. No Python exception leaves
a callback: it becomes the error code CKPT_ABORTED and its message.

The callbacks are module-level and the same for every communicator; `ctx`
is a number naming one entry of _CONTEXTS, which holds that communicator's
group until the library destroys the communicator (a manager may keep it
after the Python Communicator object is gone).
"""

import atexit
import ctypes
import gc
import itertools
import socket
import threading

from ckpt import _communicator, _errors, _lib

_ABORTED = 7  # CKPT_ABORTED
_UNAVAILABLE = 6  # CKPT_UNAVAILABLE

_INT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
_HOST_NAME = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_size_t)
_BARRIER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_size_t)
_ALL_GATHER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.c_size_t, ctypes.c_void_p,
                               ctypes.c_void_p, ctypes.c_size_t)
_BROADCAST = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_size_t)
_ABORT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)
_DESTROY = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Ops(ctypes.Structure):
    _fields_ = [
        ("rank", _INT),
        ("size", _INT),
        ("host_name", _HOST_NAME),
        ("barrier", _BARRIER),
        ("all_gather", _ALL_GATHER),
        ("broadcast", _BROADCAST),
        ("abort", _ABORT),
        ("destroy", _DESTROY),
    ]


# Declared here, apart from _lib's table: function objects of their own.
_create = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_Ops),
                           ctypes.c_void_p)(
    ("ckpt_communicator_create", _lib._lib))
_push = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_size_t)(("ckpt_bytes_list_push", _lib._lib))

# ctx number -> _Group, for as long as the library holds the communicator.
_CONTEXTS = {}
_ids = itertools.count(1)
_lock = threading.Lock()


class _Group:
    """One communicator's torch.distributed group and what it needs."""

    def __init__(self, dist, torch, group, rank, size):
        self.dist, self.torch = dist, torch
        self.group, self.rank, self.size = group, rank, size

    def global_rank(self, rank):
        """The global rank of the group's `rank` (torch's src= wants it)."""
        c10d = self.dist.distributed_c10d
        if self.group is None or self.group is c10d._get_default_group():
            return rank
        get = getattr(self.dist, "get_global_rank", None) or getattr(
            c10d, "_get_global_rank")
        return get(self.group, rank)

    def barrier(self):
        self.dist.barrier(group=self.group)

    def all_gather(self, mine, size, out):
        torch, dist = self.torch, self.dist
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.size)]
        dist.all_gather(sizes, torch.tensor([size], dtype=torch.int64),
                        group=self.group)
        sizes = [int(s[0]) for s in sizes]
        width = max(max(sizes), 1)
        buf = torch.zeros(width, dtype=torch.uint8)
        if size:
            ctypes.memmove(buf.data_ptr(), mine, size)
        parts = [torch.empty(width, dtype=torch.uint8)
                 for _ in range(self.size)]
        dist.all_gather(parts, buf, group=self.group)
        for part, n in zip(parts, sizes):
            _push(out, part.data_ptr(), n)

    def broadcast(self, data, size, root, out):
        torch, dist = self.torch, self.dist
        src = self.global_rank(root)
        n = torch.tensor([size if self.rank == root else 0],
                         dtype=torch.int64)
        dist.broadcast(n, src=src, group=self.group)
        n = int(n[0])
        buf = torch.zeros(max(n, 1), dtype=torch.uint8)
        if self.rank == root and n:
            ctypes.memmove(buf.data_ptr(), data, n)
        dist.broadcast(buf, src=src, group=self.group)
        _push(out, buf.data_ptr(), n)

    def send_recv(self, data, size, dest, source, out):
        # A non-blocking send, so that ranks passing messages around a ring
        # all reach their receive; a length first, then the bytes (gloo
        # matches messages between two ranks in order). After a timeout
        # nothing is written or read late: gloo's requests hold their
        # tensors, its transport only weak references to their buffers, and
        # a timeout closes the group's connections (docs/tiers.md).
        torch, dist = self.torch, self.dist
        sends = []
        if dest >= 0:
            d = self.global_rank(dest)
            buf = torch.empty(max(size, 1), dtype=torch.uint8)
            if size:
                ctypes.memmove(buf.data_ptr(), data, size)
            n = torch.tensor([size], dtype=torch.int64)
            sends = [dist.isend(n, d, group=self.group),
                     dist.isend(buf, d, group=self.group)]
        if source >= 0:
            s = self.global_rank(source)
            n = torch.zeros(1, dtype=torch.int64)
            dist.recv(n, s, group=self.group)
            n = int(n[0])
            got = torch.empty(max(n, 1), dtype=torch.uint8)
            dist.recv(got, s, group=self.group)
        for request in sends:
            request.wait()
        if source >= 0:
            _push(out, got.data_ptr(), n)


def _write_error(errbuf, errlen, e):
    try:
        if not errbuf or not errlen:
            return
        text = f"{type(e).__name__}: {e}".encode("utf-8", "replace")
        text = text[:errlen - 1].replace(b"\0", b" ")
        ctypes.memmove(errbuf, text + b"\0", len(text) + 1)
    except BaseException:  # noqa: B036 - nothing may leave a callback
        pass


def _run(ctx, errbuf, errlen, what):
    try:
        what(_CONTEXTS[ctx])
        return 0
    except BaseException as e:  # noqa: B036 - nothing may leave a callback
        _write_error(errbuf, errlen, e)
        # gloo's timeout (the group's): a rank that never came, as the MPI
        # communicator's timeout reports it.
        return _UNAVAILABLE if "Timed out" in str(e) else _ABORTED


def _rank(ctx):
    try:
        return _CONTEXTS[ctx].rank
    except BaseException:  # noqa: B036
        return 0


def _size(ctx):
    try:
        return _CONTEXTS[ctx].size
    except BaseException:  # noqa: B036
        return 1


def _host_name(ctx, buf, length):
    try:
        name = socket.gethostname().encode("utf-8", "replace")
        name = name[:length - 1].replace(b"\0", b" ")
        ctypes.memmove(buf, name + b"\0", len(name) + 1)
        return 0
    except BaseException:  # noqa: B036
        return _ABORTED


def _barrier(ctx, errbuf, errlen):
    return _run(ctx, errbuf, errlen, lambda g: g.barrier())


def _all_gather(ctx, mine, size, out, errbuf, errlen):
    return _run(ctx, errbuf, errlen, lambda g: g.all_gather(mine, size, out))


def _broadcast(ctx, data, size, root, out, errbuf, errlen):
    return _run(ctx, errbuf, errlen,
                lambda g: g.broadcast(data, size, root, out))


def _send_recv(ctx, data, size, dest, source, out, errbuf, errlen):
    return _run(ctx, errbuf, errlen,
                lambda g: g.send_recv(data, size, dest, source, out))


def _destroy(ctx):
    try:
        with _lock:
            _CONTEXTS.pop(ctx, None)
    except BaseException:  # noqa: B036 - also at interpreter exit
        pass


# One table for every communicator; alive as long as this module.
_OPS = _Ops(rank=_INT(_rank), size=_INT(_size),
            host_name=_HOST_NAME(_host_name), barrier=_BARRIER(_barrier),
            all_gather=_ALL_GATHER(_all_gather),
            broadcast=_BROADCAST(_broadcast), abort=_ABORT(),
            destroy=_DESTROY(_destroy))

_SEND_RECV = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_size_t)(_send_recv)

# The gloo group made for the default group, per default group and timeout:
# every rank makes the same calls, so every rank makes it (once) at the
# same point.
_own_groups = {}


# What closes the managers that ckpt's integrations keep (ckpt.torch's,
# DCP's storage's), run at interpreter exit by _release_at_exit.
_exit_hooks = []
_exit_registered = False


def on_exit(hook):
    """Runs `hook` (no arguments; what it raises is ignored) at interpreter
    exit, before ckpt's own gloo groups are let go."""
    _exit_hooks.append(hook)


def _release_at_exit():
    """At interpreter exit, while Python is still whole: closes the
    managers the integrations keep, destroys the gloo groups ckpt made and
    lets go of them. A process group whose C++ object is destroyed only in
    the interpreter's teardown (its gloo threads still holding work that
    refers to Python objects) now and then aborts the process
    ("terminate called without an active exception", SIGABRT) after the
    program itself ended well."""
    for hook in reversed(_exit_hooks):
        try:
            hook()
        except BaseException:  # noqa: B036 - exit goes on regardless
            pass
    groups = [made for _, made in _own_groups.values()]
    _own_groups.clear()
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            known = dist.distributed_c10d._world.pg_map
            for group in groups:
                if group in known:
                    dist.destroy_process_group(group)
    except BaseException:  # noqa: B036 - exit goes on regardless
        pass
    del groups
    gc.collect()


def _backend(dist, group):
    try:
        return str(dist.get_backend(group)).lower()
    except Exception:  # noqa: BLE001 - an unknown backend is not gloo
        return ""


def torch_communicator(group=None, timeout=None):
    """The ranks of a torch.distributed job, for
    CheckpointManager(communicator=...): run the program under torchrun
    and call torch.distributed.init_process_group first.

    ckpt's collectives (a few small all-gathers, broadcasts and barriers
    inside save() and load(), and a save_async's thread) and the tiers'
    point-to-point copies run on CPU tensors over gloo. With group=None, ckpt makes a gloo group of its own over
    every rank (whatever the default group's backend, NCCL included), so
    that its collectives never interleave with the program's: every rank
    must call torch_communicator() (as with any torch.distributed.new_group
    call), at the same point. A `group` passed in must have a gloo backend
    and is used as it is: then the program must not run collectives on it
    while ckpt saves or loads (a save_async included).

    timeout (seconds; group=None only): the timeout of the gloo group ckpt
    makes, so that each of ckpt's collectives waits at most this long for
    the other ranks; one that a rank never reaches (a node stopped, or cut
    off by the network) then fails with ckpt.Unavailable carrying gloo's
    message ("Timed out waiting ... ms"), which names no rank (the MPI
    communicator's does). None: torch's default for a new group (30
    minutes). A group passed in has the timeout it was made with
    (torch.distributed.new_group(backend="gloo", timeout=...)).

    Raises ckpt.FailedPrecondition when torch.distributed is not available
    or not initialized, ckpt.Unavailable without PyTorch.
    """
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        raise _errors.Unavailable(
            f"ckpt.torch_communicator(): PyTorch is not installed ({e})"
        ) from None
    if not dist.is_available():
        raise _errors.FailedPrecondition(
            "ckpt.torch_communicator(): this PyTorch has no "
            "torch.distributed")
    if not dist.is_initialized():
        raise _errors.FailedPrecondition(
            "ckpt.torch_communicator(): call "
            "torch.distributed.init_process_group first (run the program "
            "under torchrun)")
    if timeout is not None and (
            group is not None or isinstance(timeout, bool)
            or not isinstance(timeout, (int, float)) or not timeout > 0
            or timeout == float("inf")):
        raise _errors.InvalidArgument(
            f"ckpt.torch_communicator(timeout={timeout!r}): "
            + ("a group passed in keeps the timeout it was made with "
               "(torch.distributed.new_group(backend=\"gloo\", "
               "timeout=...))" if group is not None else
               "the timeout is a number of seconds > 0 (None: torch's "
               "default)"))
    if group is None:
        default = dist.distributed_c10d._get_default_group()
        key = (id(default), timeout)
        own = _own_groups.get(key)
        if own is None or own[0] is not default:
            if not dist.is_gloo_available():
                raise _errors.Unavailable(
                    "ckpt.torch_communicator(): this PyTorch has no gloo "
                    "backend, which ckpt's collectives need")
            if timeout is None:
                made = dist.new_group(backend="gloo")
            else:
                import datetime
                made = dist.new_group(
                    backend="gloo",
                    timeout=datetime.timedelta(seconds=timeout))
            own = (default, made)
            _own_groups[key] = own
            global _exit_registered
            if not _exit_registered:
                atexit.register(_release_at_exit)
                _exit_registered = True
        group = own[1]
    elif "gloo" not in _backend(dist, group):
        raise _errors.InvalidArgument(
            f"ckpt.torch_communicator(group=...): the group's backend is "
            f"{_backend(dist, group) or 'unknown'}, not gloo; pass a gloo "
            f"group (torch.distributed.new_group(backend=\"gloo\")) or "
            f"group=None")
    rank = dist.get_rank(group)
    size = dist.get_world_size(group)
    if rank < 0:
        raise _errors.InvalidArgument(
            "ckpt.torch_communicator(group=...): this process is not a "
            "member of the group")
    with _lock:
        ctx = next(_ids)
        _CONTEXTS[ctx] = _Group(dist, torch, group, rank, size)
    handle = _create(ctypes.byref(_OPS), ctx)
    if not handle:
        _destroy(ctx)
        raise MemoryError("ckpt: cannot create a communicator")
    comm = _communicator.Communicator(handle)
    # Point to point too, for tiers' replicas (Tiers, docs/tiers.md).
    _lib._call(_lib._lib.ckpt_communicator_set_send_recv, handle,
               ctypes.cast(_SEND_RECV, ctypes.c_void_p))
    return comm


def agreement_group(world_size):
    """The gloo group over which ckpt.torch's loads agree (the one
    torch_communicator() made for the default process group), when a
    manager of `world_size` ranks runs on it; None for one rank, or where
    there is no such group (the manager's communicator is another)."""
    if world_size <= 1:
        return None
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    default = dist.distributed_c10d._get_default_group()
    # The first made (with or without a timeout): every rank made the same
    # groups in the same order.
    own = next((g for (d, _), g in _own_groups.items()
                if d == id(default) and g[0] is default), None)
    if own is None or dist.get_world_size(own[1]) != world_size:
        return None
    return own[1]


def agree_max(group, value):
    """The largest of every rank's int `value`."""
    import torch
    import torch.distributed as dist
    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return int(t[0])


def broadcast_object(group, obj):
    """Rank 0's `obj` (of the group spanning every rank), on every rank."""
    import torch.distributed as dist
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=group)
    return box[0]
