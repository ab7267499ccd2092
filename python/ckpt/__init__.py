"""ckpt: durable, atomic checkpoints of NumPy arrays and PyTorch tensors.

    pip install ckpt-<version>-py3-none-linux_x86_64.whl   (make wheel)

    import ckpt
    mgr = ckpt.open("file:///data/run42", keep_last=3)
    mgr.save(step, {"model": model.state_dict(), "epoch": epoch})
    state = mgr.load(as_torch=True)        # the newest committed step

A state is a dict; its values may be NumPy arrays (bool, int8..int64,
uint8..uint64, float16, float32, float64), torch tensors (those dtypes
and bfloat16; CUDA ones too, and any __cuda_array_interface__ object), memoryviews, array.arrays and other objects with the buffer
protocol (tensors too; NumPy is optional), NumPy scalars (0-d tensors:
load() gives 0-d arrays, load_into() scalars again), bytes (blobs), int, float, str, bool and None (metadata
entries that load as the same Python type), ckpt.Metadata (a JSON object
kept as one entry), and dicts, lists and tuples of these. Nested containers
become dotted entry names ("model.fc.weight") and are rebuilt on load.

Arrays and tensors are not copied on save (the library reads their
buffers), nor by load() (it reads into the arrays it returns), except that
a non-contiguous or big-endian array is first copied into a C-contiguous
one. load_into() and ckpt.torch.load() are all-or-nothing: no byte of yours
changes before every entry has been read and checked (load_into in the
manager's staging memory or where the files lie in the page cache,
ckpt.torch.load in new tensors: one extra copy of the state at the peak);
transactional=False reads straight into yours.

PyTorch's distributed-checkpoint calls (save, load in place, async_save,
Stateful objects, DTensor and ShardedTensor leaves) and safetensors
consolidation are in ckpt.torch: import ckpt.torch.
JAX pytrees (jax.Arrays sharded over a mesh, restored onto any mesh, with
Orbax's CheckpointManager calls) are in ckpt.jax: import ckpt.jax.

Many ranks: CheckpointManager(url, communicator=ckpt.mpi_communicator())
under mpirun, or communicator=ckpt.torch_communicator() under torchrun;
ckpt.Shard(array, offsets, global_shape) is one rank's box of
a sharded tensor, ckpt.RankLocal(value) a value of one rank alone. The
catalog: CheckpointManager(url, catalog=True) records every save;
ckpt.Catalog().latest(job_id) says what to resume from. ckpt.report(root,
path) writes an HTML report of a root (or of a catalog: docs/report.md).

Every error is a ckpt.Error: InvalidArgument (also a ValueError), NotFound,
AlreadyExists, DataLoss, IOError, Unavailable, Aborted, FailedPrecondition.
"""

from ckpt._lib import __version__
from ckpt._errors import (
    Aborted,
    AlreadyExists,
    DataLoss,
    Error,
    FailedPrecondition,
    InvalidArgument,
    IOError,
    NotFound,
    Unavailable,
)
from ckpt._async_save import AsyncSave
from ckpt._catalog import Catalog
from ckpt._communicator import HAS_MPI, Communicator
from ckpt._records import (
    CatalogCheckpoint,
    CatalogJob,
    CheckpointInfo,
    EntryInfo,
    SaveResult,
    TierRestoreResult,
    TierSaveResult,
)
from ckpt._dist import mpi_communicator
from ckpt._torch_dist import torch_communicator
from ckpt._manager import CheckpointManager, open
from ckpt._report import report
from ckpt._tiers import Tiers, local_tier
from ckpt._tree import Metadata
from ckpt._values import RankLocal, Shard

__all__ = [
    "__version__", "HAS_MPI", "Aborted", "AlreadyExists", "AsyncSave", "Catalog",
    "CatalogCheckpoint", "CatalogJob", "CheckpointInfo", "CheckpointManager",
    "Communicator", "DataLoss", "EntryInfo", "Error", "FailedPrecondition",
    "IOError", "InvalidArgument", "Metadata", "NotFound", "RankLocal",
    "SaveResult", "Shard", "TierRestoreResult", "TierSaveResult", "Tiers",
    "Unavailable", "local_tier", "mpi_communicator", "open", "report",
    "torch_communicator",
]
