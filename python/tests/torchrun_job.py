"""A many-rank Python job for test_torchrun.py, run under torchrun (gloo).

  torchrun_job.py OP... where each OP is one of

  save ROOT         every rank saves its rows of "w" (ckpt.Shard), its own
                    position and RNG bytes (ckpt.RankLocal), a replicated
                    tensor and metadata, as step 6 (save) and step 7
                    (save_async)
  load ROOT SAVERS  every rank fills its rows of "w" (split over however many
                    ranks run now) and checks every value, bit for bit, then
                    load()s the whole state and checks it too
  bad ROOT          rank 1 saves "bias" with another shape than the other
                    ranks: every rank must get an error (it prints its class
                    to stderr: "rank R error CLASS: message") and nothing
                    may be committed

Exits 1 on any mismatch. Several operations in one job save starting
PyTorch (the slow part) more than once.
"""

import os
import sys

import torch
import torch.distributed as dist

import ckpt

ROWS, COLS = 30, 4


def expected():
    return torch.arange(ROWS * COLS, dtype=torch.float32).reshape(
        ROWS, COLS) / 7


def bias():
    return torch.linspace(-1, 1, 5, dtype=torch.float64)


def my_rows(rank, size):
    lo = ROWS * rank // size
    return lo, ROWS * (rank + 1) // size


def same_bits(a, b):
    return (a.dtype == b.dtype and a.shape == b.shape
            and a.numpy().tobytes() == b.numpy().tobytes())


def fail(rank, what):
    print(f"rank {rank}: {what}", file=sys.stderr, flush=True)
    sys.exit(1)


def save(root, rank, size, lo, hi, comm):
    mgr = ckpt.open(root, communicator=comm, job_id="torchrun-job")
    if mgr.rank != rank or mgr.world_size != size:
        fail(rank, f"manager rank/world_size {mgr.rank}/{mgr.world_size}")
    state = {
        "w": ckpt.Shard(expected()[lo:hi].clone(), [lo, 0], [ROWS, COLS]),
        "pos": ckpt.RankLocal(torch.tensor([1000 + rank],
                                           dtype=torch.int64)),
        "rng": ckpt.RankLocal(f"rng of rank {rank}".encode()),
        "bias": bias(),
        "epoch": 4,
    }
    mgr.save(6, state, epoch=4)
    # The library calls the communicator from a thread of its own too.
    pending = mgr.save_async(7, state, epoch=4, metrics={"loss": 0.25},
                             metadata={"launcher": "torchrun"})
    pending.wait()
    infos = mgr.list()
    if [(i.step, i.world_size) for i in infos] != [(6, size), (7, size)]:
        fail(rank, f"committed {infos}")


def load(root, rank, size, lo, hi, comm, savers):
    mgr = ckpt.open(root, communicator=comm, create=False)
    target = {"w": ckpt.Shard(torch.zeros(hi - lo, COLS), [lo, 0],
                              [ROWS, COLS]),
              "bias": torch.zeros(5, dtype=torch.float64)}
    info = mgr.load_into(target)
    if info.step != 7 or info.world_size != savers:
        fail(rank, f"loaded {info}")
    if not same_bits(target["w"].value, expected()[lo:hi]):
        fail(rank, "shard differs")
    if not same_bits(target["bias"], bias()):
        fail(rank, "replicated tensor differs")
    whole = mgr.load(as_torch=True)
    if not same_bits(whole["w"], expected()):
        fail(rank, "load() did not assemble the whole tensor")
    if not same_bits(whole["bias"], bias()) or whole["epoch"] != 4:
        fail(rank, "load() gave other values")
    if ("pos" in whole) != (size == savers):
        fail(rank, "rank-local entries at the wrong world size")
    if size == savers and (int(whole["pos"][0]) != 1000 + rank
                           or whole["rng"] != f"rng of rank {rank}".encode()):
        fail(rank, f"own rank-local values {whole['pos']} {whole['rng']}")
    positions = mgr.load_rank_local("pos")
    if sorted(positions) != list(range(savers)) or any(
            int(positions[r][0]) != 1000 + r for r in positions):
        fail(rank, f"load_rank_local gave {positions}")
    described = mgr.describe()
    if described.info.metadata.get("launcher") != "torchrun":
        fail(rank, f"metadata {described.info.metadata}")


def bad(root, rank, size, comm):
    mgr = ckpt.open(root, communicator=comm, job_id="torchrun-job")
    n = 6 if rank == 1 else 5
    state = {"bias": torch.zeros(n, dtype=torch.float64),
             "w": ckpt.Shard(torch.zeros(1, COLS), [rank, 0], [size, COLS])}
    try:
        mgr.save(3, state)
    except ckpt.Error as e:
        # Every rank prints the class it got; the test compares them.
        print(f"rank {rank} error {type(e).__name__}: {e}", file=sys.stderr,
              flush=True)
    else:
        fail(rank, "a save with another shape on rank 1 succeeded")
    if mgr.list():
        fail(rank, f"something was committed: {mgr.list()}")
    if mgr.latest() is not None:
        fail(rank, "latest() is not None")


def main():
    dist.init_process_group("gloo")
    comm = ckpt.torch_communicator()
    rank, size = comm.rank, comm.size
    if (rank, size) != (dist.get_rank(), dist.get_world_size()):
        fail(rank, f"communicator says {rank}/{size}")
    if int(os.environ["RANK"]) != rank:
        fail(rank, "RANK differs")
    lo, hi = my_rows(rank, size)
    args = sys.argv[1:]
    while args:
        op, root, args = args[0], args[1], args[2:]
        if op == "save":
            save(root, rank, size, lo, hi, comm)
        elif op == "load":
            load(root, rank, size, lo, hi, comm, int(args[0]))
            args = args[1:]
        elif op == "bad":
            bad(root, rank, size, comm)
        else:
            fail(rank, f"unknown operation {op}")
    comm.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
