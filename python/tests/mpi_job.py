"""A many-rank Python job for test_cluster.py, run under mpirun.

  mpi_job.py save ROOT CATALOG   every rank saves its shard of "w", its own
                                 position and RNG bytes, and a replicated
                                 array, as step 7
  mpi_job.py load ROOT SAVERS    every rank fills its shard of "w" (split
                                 over however many ranks run now) and checks
                                 every value; exits 1 on any mismatch
  mpi_job.py silent SECONDS      with a timeout of SECONDS, rank 1 stays
                                 away from a barrier longer than that; every
                                 other rank's barrier must fail within the
                                 timeout and a second of pings, naming rank 1
"""

import sys

import numpy as np

import ckpt

from silent_rank import silent_rank

ROWS, COLS = 30, 4


def expected():
    return np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS) / 7


def my_rows(rank, size):
    lo = ROWS * rank // size
    return lo, ROWS * (rank + 1) // size


def fail(rank, what):
    print(f"rank {rank}: {what}", file=sys.stderr)
    sys.exit(1)


def silent(timeout):
    comm = ckpt.mpi_communicator(timeout=timeout)
    why = silent_rank(comm, timeout, fail)
    if why is None:
        return
    if "rank 1 (" not in why or "does not answer a ping" not in why:
        fail(comm.rank, f"the error does not name rank 1: {why}")
    print(f"rank {comm.rank}: {why}")


def main():
    if sys.argv[1] == "silent":
        silent(float(sys.argv[2]))
        return
    op, root = sys.argv[1], sys.argv[2]
    comm = ckpt.mpi_communicator()
    rank, size = comm.rank, comm.size
    lo, hi = my_rows(rank, size)
    if op == "save":
        mgr = ckpt.open(root, communicator=comm, catalog=sys.argv[3],
                        job_id="mpi-job")
        state = {
            "w": ckpt.Shard(expected()[lo:hi].copy(), [lo, 0], [ROWS, COLS]),
            "pos": ckpt.RankLocal(np.array([1000 + rank], dtype=np.int64)),
            "rng": ckpt.RankLocal(f"rng of rank {rank}".encode()),
            "bias": np.full(5, 2.5),
            "epoch": 4,
        }
        mgr.save(7, state, epoch=4, metrics={"loss": 0.25})
        if mgr.rank != rank or mgr.world_size != size:
            fail(rank, "manager rank/world_size disagree with MPI")
        return
    savers = int(sys.argv[3])
    mgr = ckpt.open(root, communicator=comm, create=False)
    target = {"w": ckpt.Shard(np.zeros((hi - lo, COLS), np.float32), [lo, 0],
                              [ROWS, COLS]),
              "bias": np.zeros(5)}
    info = mgr.load_into(target)
    if info.step != 7 or info.world_size != savers:
        fail(rank, f"loaded {info}")
    if not np.array_equal(target["w"].value, expected()[lo:hi]):
        fail(rank, "shard differs")
    if not np.array_equal(target["bias"], np.full(5, 2.5)):
        fail(rank, "replicated array differs")
    whole = mgr.load()
    if not np.array_equal(whole["w"], expected()):
        fail(rank, "load() did not assemble the whole tensor")
    if ("pos" in whole) != (size == savers):
        fail(rank, "rank-local entries at the wrong world size")
    if size == savers and whole["pos"][0] != 1000 + rank:
        fail(rank, f"own position {whole['pos']}")
    positions = mgr.load_rank_local("pos")
    if sorted(positions) != list(range(savers)) or any(
            positions[r][0] != 1000 + r for r in positions):
        fail(rank, f"load_rank_local gave {positions}")


if __name__ == "__main__":
    main()
