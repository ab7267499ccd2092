"""Host memory a manager keeps for its all-or-nothing loads into new
tensors (ckpt.torch.load, the DCP reader): such a load reads every CPU
tensor into memory of its own and exchanges the bytes with the state's
only once all of it is whole. Pages mapped anew cost the kernel a fault
and a zeroing each, about as long as reading them from the disk, so a
process that loads again (an evaluation of many steps, a job that falls
back to an older step) reuses the memory of its last load instead of
mapping a state's worth again (docs/benchmarks.md, "load_into.py").

The manager gives the memory back at its next save (a job that resumed
and trains on needs it no more: a save stages in memory of the library's
own) and at close(); a load larger than async_staging_bytes, where that
is set, keeps none.
"""
import threading
import weakref

from ckpt import _values

# Tensors this large start on a page of their own, so that the library's
# O_DIRECT reads land in them without a bounce; smaller ones on a cache
# line (a state of many small tensors would waste pages).
_PAGE = 4096
_PAGE_FROM = 64 << 10
_LINE = 64


def _span(nbytes):
    """The most bytes a tensor of `nbytes` takes in the memory, the gap
    before it that aligns it included (as _Lease.empty_like places it)."""
    return nbytes + (_PAGE if nbytes >= _PAGE_FROM else _LINE)


class LoadMemory:
    """One manager's memory for its loads; lend() hands it to one load at a
    time. Thread-safe."""

    def __init__(self, bound=0):
        self._bound = bound  # bytes; 0: none
        self._lock = threading.Lock()
        self._buffer = None  # a uint8 CPU tensor
        self._lent = False

    def lend(self, sizes):
        """A _Lease carving new CPU tensors of the byte sizes `sizes` from
        the kept memory (grown to fit), or None: no tensors, PyTorch not
        loaded, over the bound, or the memory lent to a load that is still
        going on (which then takes new memory of its own, as before)."""
        torch = _values._loaded_torch()
        need = sum(_span(s) for s in sizes) + _PAGE
        if torch is None or not sizes or (self._bound and need > self._bound):
            return None
        with self._lock:  # mapping takes no time: pages come when touched
            if self._lent:
                return None
            buffer = self._buffer
            if buffer is None or buffer.numel() < need:
                self._buffer = buffer = None  # free the old one first
                buffer = torch.empty(need, dtype=torch.uint8)
                self._buffer = buffer
            self._lent = True
        lease = _Lease(torch, buffer)
        # The memory is lent while the lease or a tensor carved from it
        # (each holds the lease) is held: a load whose error is kept with
        # its traceback keeps it, and the next load maps its own.
        weakref.finalize(lease, self._returned)
        return lease

    def _returned(self):
        with self._lock:
            self._lent = False

    def drop(self):
        """Gives the memory back (a lease still out keeps what it was lent
        until it is done)."""
        with self._lock:
            self._buffer = None


class _Lease:
    """Carves tensors from a LoadMemory's buffer, front to back."""

    __slots__ = ("_torch", "_buffer", "_at", "__weakref__")

    def __init__(self, torch, buffer):
        self._torch, self._buffer = torch, buffer
        # The buffer's first page boundary.
        self._at = -buffer.data_ptr() % _PAGE

    def empty_like(self, like):
        """A new contiguous CPU tensor of the shape and dtype of `like` in
        the memory (its bytes are the last load's); past what lend() was
        asked for, one of its own."""
        nbytes = like.numel() * like.element_size()
        align = _PAGE if nbytes >= _PAGE_FROM else _LINE
        start = self._at + -(self._buffer.data_ptr() + self._at) % align
        end = start + nbytes
        if end > self._buffer.numel():
            return self._torch.empty(like.shape, dtype=like.dtype)
        self._at = end
        tensor = self._buffer[start:end].view(like.dtype).view(like.shape)
        tensor._ckpt_lease = self  # lent while the tensor is held
        return tensor
