"""A many-rank job for test_dcp_storage.py, run under torchrun (gloo, CPU):
PyTorch's dcp.save, dcp.async_save and dcp.load through
ckpt.torch.StorageWriter and StorageReader.

  dcp_job.py OP... where each OP is one of

  save ROOT          dcp.save of state(1) (step 1: no checkpoint_id, an
                     empty root), then dcp.async_save of state(2) (step 2),
                     waited for
  load ROOT ID V     dcp.load into a fresh state of this world size (its
                     DTensor split over the ranks that run now), with
                     checkpoint_id ID ("-": none, the newest step); every
                     value must be state(V)'s, bit for bit
  damaged ROOT ID    dcp.load of step ID, which the test damaged: every
                     rank must raise (it prints "rank R raised CLASS
                     (DataLoss)"), and every value of the state must be
                     what it was before
  fssave DIR V       dcp.save of state(V) with DCP's own FileSystemWriter
                     (test_dcp_files.py imports it into ckpt)
  fsload DIR V       dcp.load with DCP's own FileSystemReader (of what
                     `ckpt export --format dcp` wrote): state(V) bit for bit
  process ROOT       dcp.save (step 1), then dcp.async_save with
                     AsyncCheckpointerType.PROCESS, which must fail at once
                     naming it (it prints "rank R refused PROCESS") and save
                     nothing, then the default dcp.async_save (step 2)

The state: a replicated tensor (which DCP has one rank write whole), a
DTensor of 7 rows sharded with Shard(0) on a 1-d mesh (uneven at 2 and 3
ranks), a bfloat16 tensor, an Adam-like optimizer state (nested dicts, a
0-d step, param_groups with a tuple) and plain Python values (bytes items).
Each rank prints "rank R ok OP" after each operation; a mismatch exits 1.
"""

import sys
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

import ckpt.torch as ct

warnings.filterwarnings("ignore", category=FutureWarning)


def values(v):
    """The global values of state(v), the same on every rank."""
    g = torch.Generator().manual_seed(v)
    return {"rep": torch.randn(5, 3, generator=g),
            "rows": torch.randn(7, 4, generator=g),
            "bf": torch.randn(6, generator=g).to(torch.bfloat16),
            "exp_avg": torch.randn(5, 3, generator=g),
            "exp_avg_sq": torch.rand(5, 3, generator=g),
            "ids": torch.arange(10, dtype=torch.int64) * v}


def state(v, mesh, fill=None):
    """The state of version v, or of its shapes filled with `fill`."""
    x = values(v)
    if fill is not None:
        x = {k: torch.full_like(t, fill) for k, t in x.items()}
    return {
        "model": {"rep": x["rep"], "bf": x["bf"], "ids": x["ids"],
                  "rows": distribute_tensor(x["rows"], mesh, [Shard(0)])},
        "optim": {
            "state": {"model.rep": {"exp_avg": x["exp_avg"],
                                    "exp_avg_sq": x["exp_avg_sq"],
                                    "step": torch.tensor(float(v))}},
            "param_groups": [{"lr": 0.01 * v, "betas": (0.9, 0.999),
                              "params": ["model.rep"]}]},
        "epoch": v if fill is None else -1,
        "run": {"name": f"run-{v}" if fill is None else "",
                "history": [1, 2, v] if fill is None else []},
    }


def flat(s):
    """[(path, value)] of a state, DTensors whole."""
    out = []

    def walk(x, path):
        if isinstance(x, dict):
            for k in sorted(x):
                walk(x[k], path + (k,))
        elif hasattr(x, "full_tensor"):
            out.append((path, x.full_tensor()))
        else:
            out.append((path, x))

    walk(s, ())
    return out


def same(a, b):
    """Equal values; tensors of one dtype and shape, bit for bit."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a.reshape(-1).view(torch.uint8),
                                b.reshape(-1).view(torch.uint8)))
    return type(a) is type(b) and a == b


def check(rank, got, want, what):
    g, w = flat(got), flat(want)
    if [p for p, _ in g] != [p for p, _ in w]:
        fail(rank, f"{what}: paths {[p for p, _ in g]} != {[p for p, _ in w]}")
    for (path, a), (_, b) in zip(g, w):
        if not same(a, b):
            fail(rank, f"{what}: {'.'.join(path)} is {a!r}, not {b!r}")


def fail(rank, why):
    print(f"rank {rank} FAILED: {why}", file=sys.stderr, flush=True)
    sys.exit(1)


def save(root, rank, mesh):
    writer = ct.StorageWriter(root)
    dcp.save(state(1, mesh), storage_writer=writer)
    if writer.last_step != 1:
        fail(rank, f"dcp.save wrote step {writer.last_step}, not 1")
    s = state(2, mesh)
    future = dcp.async_save(s, storage_writer=writer)
    # async_save copied the state: changing it now changes nothing saved.
    s["model"]["rep"].add_(1)
    future.result()
    if writer.last_step != 2:
        fail(rank, f"dcp.async_save wrote step {writer.last_step}, not 2")


def load(root, rank, mesh, checkpoint_id, v):
    got = state(v, mesh, fill=0)
    reader = ct.StorageReader(root)
    step = None if checkpoint_id == "-" else int(checkpoint_id)
    dcp.load(got, storage_reader=reader, checkpoint_id=step)
    if checkpoint_id != "-" and reader.step != int(checkpoint_id):
        fail(rank, f"loaded step {reader.step}, not {checkpoint_id}")
    check(rank, got, state(v, mesh), f"load {checkpoint_id} of {root}")


def damaged(root, rank, mesh, step):
    got = state(9, mesh)
    before = flat(state(9, mesh))
    # Each rank's own values, DTensors' local shards included, are checked
    # before the load attempt as after it.
    check(rank, got, state(9, mesh), "before the load")
    try:
        dcp.load(got, storage_reader=ct.StorageReader(root),
                 checkpoint_id=step)
    except BaseException as e:  # noqa: B036 - DCP's CheckpointException is one
        text = str(e)
        kind = "DataLoss" if "DataLoss" in text or "checksum" in text \
            else "other"
        print(f"rank {rank} raised {type(e).__name__} ({kind})",
              file=sys.stderr, flush=True)
    else:
        fail(rank, "dcp.load of a damaged step did not raise")
    after = flat(got)
    for (path, a), (_, b) in zip(after, before):
        if not same(a, b):
            fail(rank, f"the failed load changed {'.'.join(path)}")


def fssave(directory, v, mesh):
    dcp.save(state(v, mesh), storage_writer=dcp.FileSystemWriter(directory))


def fsload(directory, rank, mesh, v):
    got = state(v, mesh, fill=0)
    dcp.load(got, storage_reader=dcp.FileSystemReader(directory))
    check(rank, got, state(v, mesh), f"FileSystemReader load of {directory}")


def process(root, rank):
    import time
    from torch.distributed.checkpoint.state_dict_saver import \
        AsyncCheckpointerType
    writer = ct.StorageWriter(root)
    dcp.save({"w": torch.ones(3)}, storage_writer=writer)  # holds the lease
    started = time.monotonic()
    try:
        dcp.async_save({"w": torch.zeros(3)}, storage_writer=writer,
                       async_checkpointer_type=AsyncCheckpointerType.PROCESS
                       ).result()
    except BaseException as e:  # noqa: B036 - DCP's CheckpointException is one
        took = time.monotonic() - started
        # Not after the lease wait (70 s by default), blaming the lease.
        if "AsyncCheckpointerType.PROCESS" not in str(e) or took > 50:
            fail(rank, f"after {took:.0f} s: {e}")
        print(f"rank {rank} refused PROCESS", file=sys.stderr, flush=True)
    else:
        fail(rank, "dcp.async_save in DCP's background process saved")
    dcp.async_save({"w": torch.full((3,), 2.0)}, storage_writer=writer
                   ).result()
    if writer.last_step != 2:
        fail(rank, f"the next dcp.async_save wrote step {writer.last_step}")


def main():
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (size,))
    args = sys.argv[1:]
    while args:
        op, root, args = args[0], args[1], args[2:]
        if op == "save":
            save(root, rank, mesh)
        elif op == "load":
            load(root, rank, mesh, args[0], int(args[1]))
            args = args[2:]
        elif op == "damaged":
            damaged(root, rank, mesh, int(args[0]))
            args = args[1:]
        elif op == "fssave":
            fssave(root, int(args[0]), mesh)
            args = args[1:]
        elif op == "fsload":
            fsload(root, rank, mesh, int(args[0]))
            args = args[1:]
        elif op == "process":
            process(root, rank)
        else:
            fail(rank, f"unknown operation {op}")
        print(f"rank {rank} ok {op}", file=sys.stderr, flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
