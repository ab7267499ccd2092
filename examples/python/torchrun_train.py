#!/usr/bin/env python3
"""Data-parallel training under torchrun that checkpoints with ckpt.torch
and resumes at any number of ranks, ending bit-identical whatever the world
size and however often it was killed.

    export PYTHONPATH=build/release/python
    .venv/bin/python -m torch.distributed.run --standalone \\
        --nproc_per_node 2 --redirects 1 --tee 1 \\
        examples/python/torchrun_train.py --root /tmp/run --steps 12 \\
        --save-every 3 --out /tmp/run.params [--die-at 6]

(`torchrun` works as well as `python3 -m torch.distributed.run`;
--redirects 1 --tee 1 are needed by torchrun of PyTorch 1.13 under Python
3.11, which cannot parse its own defaults for them.)

Every rank trains the same small MLP with Adam over gloo on CPU. After
every --save-every steps (and after the last one) the model, the optimizer
and the step counter are saved with ckpt.torch.async_save, in the
background while training goes on. Started again with the same --root, at
the same or another --nproc_per_node, the job resumes from the newest
committed checkpoint and prints "resumed from step S (saved by N ranks) on
M ranks". At the end rank 0 writes the raw bytes of the model parameters
and of the Adam state to --out and prints their SHA-256.

--die-at STEP makes rank 0 kill itself with SIGKILL right after step STEP
(after starting that step's save, when it is a save step, so that the save
is cut short): the other ranks fail in their next collective and torchrun
exits nonzero.

Why the result does not depend on the world size: floating-point sums in
another order give other bits, so the gradient is never summed in an order
that depends on the ranks. Each global batch has BATCH samples; the rank
that owns sample i (i % world == rank) computes that sample's gradient
alone (a batch of one: the same shapes, and so the same kernels, at any
world size) and writes it to row i of a zero [BATCH, P] matrix. An
all-reduce SUM of that matrix is exact, as every row has one non-zero
contributor (x + 0 == x; only a -0.0 becomes +0.0, so every zero is made
+0.0 at every world size), and afterwards every rank adds the rows itself
in the order 0..BATCH-1. The samples of a step come from a generator seeded
with the step number alone, so there is no data-loader position to save.
"""

import argparse
import hashlib
import os
import signal

import torch
import torch.distributed as dist

import ckpt.torch as ct

SAMPLES, FEATURES, HIDDEN, OUTPUTS = 240, 16, 128, 4
# The global batch: 1, 2 and 5 ranks divide it; at 3 or 4 ranks some ranks
# get one sample more than others.
BATCH = 10


def make_data():
    """A fixed synthetic regression data set, the same on every rank."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, OUTPUTS, generator=g)
    y = torch.sin(x @ w) + 0.1 * torch.randn(SAMPLES, OUTPUTS, generator=g)
    return x, y


def make_model():
    # Seeded, so every rank starts from the same weights without a
    # broadcast; a resumed job overwrites them anyway.
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN),
                               torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, OUTPUTS))


def batch_of(step):
    """The sample indices of global step `step`: a function of the step
    alone, so a resumed job, at any world size, sees the same batches."""
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randperm(SAMPLES, generator=g)[:BATCH]


def train_step(model, optimizer, x, y, step, rank, world):
    """One optimizer step on batch_of(step); returns the batch's mean loss,
    the same bits on every rank."""
    params = list(model.parameters())
    sizes = [p.numel() for p in params]
    # Row i holds sample i's gradient and, in the last column, its loss.
    rows = torch.zeros(BATCH, sum(sizes) + 1)
    idx = batch_of(step)
    for i in range(rank, BATCH, world):
        model.zero_grad(set_to_none=True)
        j = int(idx[i])
        loss = torch.nn.functional.mse_loss(model(x[j:j + 1]), y[j:j + 1])
        loss.backward()
        rows[i, :-1] = torch.cat([p.grad.reshape(-1) for p in params])
        rows[i, -1] = loss.detach()
    if world > 1:
        dist.all_reduce(rows, op=dist.ReduceOp.SUM)
    # The one thing the reduction can change is the sign of a zero
    # (-0.0 + 0.0 is +0.0), and only when there is more than one rank:
    # make every zero +0.0 at every world size.
    rows.add_(0.0)
    total = rows[0].clone()
    for i in range(1, BATCH):  # in index order, whatever the world size
        total += rows[i]
    total /= BATCH
    offset = 0
    for p, n in zip(params, sizes):
        p.grad = total[offset:offset + n].view_as(p).clone()
        offset += n
    optimizer.step()
    return float(total[-1])


def ranks(n):
    return f"{n} rank" if n == 1 else f"{n} ranks"


def final_tensors(model, optimizer):
    """The model's parameters and the Adam state, in a fixed order."""
    tensors = list(model.state_dict().values())
    state = optimizer.state_dict()["state"]
    for key in sorted(state):
        tensors += [state[key][name] for name in sorted(state[key])
                    if torch.is_tensor(state[key][name])]
    return tensors


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", required=True, help="checkpoint root (path/URL)")
    p.add_argument("--steps", type=int, default=12, help="steps to train")
    p.add_argument("--save-every", type=int, default=3, metavar="K",
                   help="save after every K steps (and after the last)")
    p.add_argument("--out", required=True,
                   help="file for the final parameters (raw bytes)")
    p.add_argument("--die-at", type=int, default=None, metavar="STEP",
                   help="rank 0 SIGKILLs itself after step STEP")
    args = p.parse_args()

    # One thread: the kernels' results then do not depend on how the work
    # is split between threads.
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    x, y = make_data()
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    # Stateful objects: ckpt.torch saves their state_dict() and, on load,
    # fills it and calls load_state_dict() (creating Adam's moments).
    state = {"model": model, "optim": optimizer, "step": 0}
    # create=True: the first run starts a new job in a root not made yet
    # (without it, a root that does not exist is an error: a mistyped path).
    if ct.latest(args.root, create=True) is not None:
        info = ct.load(state, args.root)
        if rank == 0:
            print(f"resumed from step {info.step} (saved by "
                  f"{ranks(info.world_size)}) on {ranks(world)}", flush=True)

    pending = None
    step = state["step"]  # steps done so far
    while step < args.steps:
        loss = train_step(model, optimizer, x, y, step, rank, world)
        step += 1
        if step % args.save_every == 0 or step == args.steps:
            # One save in flight at a time: the previous one must have
            # committed (or raised its error) before the next starts.
            if pending is not None:
                pending.wait()
            state["step"] = step
            pending = ct.async_save(state, args.root, step,
                                    metrics={"loss": loss})
            if rank == 0:
                print(f"step {step}: loss {loss:.6f}, saving", flush=True)
        if step == args.die_at and rank == 0:
            print(f"step {step}: rank 0 kills itself (SIGKILL)", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    if pending is not None:
        pending.wait()
    # Lets go of the manager ckpt.torch kept for --root (and of the root's
    # lease) while the process group it saved over still exists.
    ct.close()

    if rank == 0:
        data = b"".join(t.detach().contiguous().numpy().tobytes()
                        for t in final_tensors(model, optimizer))
        with open(args.out, "wb") as f:
            f.write(data)
        print(f"final state sha256: {hashlib.sha256(data).hexdigest()}",
              flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
