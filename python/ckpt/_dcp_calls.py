"""Which call of PyTorch's distributed checkpoint (DCP) is running a
ckpt.torch storage, read from the caller's stack: DCP passes its storage
neither the checkpoint_id it was given (only reset() when there is one)
nor where it runs.
"""

import sys

from ckpt import _errors

# The calls that pass a checkpoint_id to a storage's reset(): (module,
# function) of dcp.save (dcp.async_save calls it on its thread) and
# dcp.load.
_DCP_CALLS = {("torch.distributed.checkpoint.state_dict_saver", "save"),
              ("torch.distributed.checkpoint.state_dict_loader", "load")}

# The module whose process dcp.async_save(async_checkpointer_type=
# AsyncCheckpointerType.PROCESS) saves in, with a pickled copy of the
# storage writer.
_BACKGROUND_PROCESS = "torch.distributed.checkpoint._async_process_executor"


def named_an_id():
    """Whether the dcp.save or dcp.load on this thread's stack was given a
    checkpoint_id, or None where none is. DCP calls reset() only for a
    checkpoint_id, so that of a call that failed before it set up its
    storage would otherwise pass to the next call, which names none."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if (frame.f_globals.get("__name__"), code.co_name) in _DCP_CALLS \
                and "checkpoint_id" in code.co_varnames:
            return frame.f_locals.get("checkpoint_id") is not None
        frame = frame.f_back
    return None


def refuse_a_background_process(url):
    """Raises where this save runs in DCP's checkpoint background process.
    A root is written by one manager at a time, under its lease, and the
    process that called dcp.async_save keeps its own manager of the root
    (and so the lease) between saves: the copy of the writer there would
    wait lease_wait_seconds for it and then fail, blaming "another party",
    with advice to break the lease of the job's own live process."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == _BACKGROUND_PROCESS:
            raise _errors.InvalidArgument(
                f"ckpt.torch.StorageWriter({url!r}): dcp.async_save with "
                f"async_checkpointer_type=AsyncCheckpointerType.PROCESS "
                f"saves in DCP's background process, which cannot write "
                f"the root while the training process holds its lease; "
                f"nothing was saved. Use the default executor "
                f"(AsyncCheckpointerType.THREAD), which also returns once "
                f"the state is staged")
        frame = frame.f_back
