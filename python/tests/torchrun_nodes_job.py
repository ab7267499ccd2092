"""A torchrun job for examples/train/nodes_test.cc, run by one torchrun
agent on each node of the node bed (scripts/node-bed.sh), over gloo on the
bed's network.

  torchrun_nodes_job.py ROOT

Every rank saves, with ckpt.torch, a model and its Adam optimizer (the same
on every rank: replicated, written once), its rows of a tensor sharded
across the ranks (ckpt.Shard) and its own host name (ckpt.RankLocal) as
step 1 of ROOT, a folder that every node sees. Then it loads step 1 into
fresh objects (an optimizer without moments, rows of zeros) and checks
every value bit for bit. Each rank prints one line,

  rank R of N on HOST: loaded step 1 bit-identical

or "rank R of N on HOST: FAILED: ..." and then exits 1.
"""

import socket
import sys

import torch
import torch.distributed as dist

import ckpt
import ckpt.torch as ct

from torchrun_job import same_bits, trained_model

ROWS, COLS = 10, 3


def state(rank, size, saved):
    """The state saved (saved=True), or the fresh one loaded into."""
    model, opt = trained_model(3 if saved else 0)
    lo, hi = ROWS * rank // size, ROWS * (rank + 1) // size
    rows = torch.arange(ROWS * COLS, dtype=torch.float64).reshape(
        ROWS, COLS).sqrt()[lo:hi].clone()
    return {"model": model, "optim": opt,
            "rows": ckpt.Shard(rows if saved else torch.zeros_like(rows),
                               [lo, 0], [ROWS, COLS]),
            "host": ckpt.RankLocal(socket.gethostname().encode()
                                   if saved else b"")}


def differences(got, want):
    """What of the loaded state `got` is not the saved `want`."""
    wrong = [f"model {name}"
             for (name, g), w in zip(got["model"].state_dict().items(),
                                     want["model"].state_dict().values())
             if not same_bits(g, w)]
    g = got["optim"].state_dict()["state"]
    w = want["optim"].state_dict()["state"]
    if sorted(g) != sorted(w) or any(
            not same_bits(g[i][k], w[i][k])
            for i in w for k in ("exp_avg", "exp_avg_sq")):
        wrong.append("the optimizer's moments")
    if not same_bits(got["rows"].value, want["rows"].value):
        wrong.append("this rank's rows")
    if got["host"].value != want["host"].value:
        wrong.append(f"the host name ({got['host'].value!r})")
    return wrong


def main():
    root = sys.argv[1]
    dist.init_process_group("gloo")
    comm = ckpt.torch_communicator()
    rank, size = comm.rank, comm.size
    try:
        saved = state(rank, size, True)
        ct.save(saved, root, 1)
        loaded = state(rank, size, False)
        info = ct.load(loaded, root)
        failure = ", ".join(differences(loaded, saved))
        if failure:
            failure += " differ"
        elif info.step != 1:
            failure = f"loaded step {info.step}"
    except Exception as e:  # noqa: BLE001 - printed for the test
        failure = f"{type(e).__name__}: {e}"
    print(f"rank {rank} of {size} on {comm.host_name}: "
          + (f"FAILED: {failure}" if failure
             else "loaded step 1 bit-identical"), flush=True)
    comm.barrier()
    dist.destroy_process_group()
    sys.exit(1 if failure else 0)


if __name__ == "__main__":
    main()
