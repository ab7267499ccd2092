"""A torchrun job of test_fsdp2.py: a model sharded with FSDP2
(fully_shard) and its Adam state, through
torch.distributed.checkpoint.state_dict and ckpt.torch, beside DTensors on a
1-D and a 2-D mesh.

    torchrun ... fsdp2_job.py save ROOT REF   (4 ranks) trains 3 steps and
                                              saves step 3; rank 0 writes
                                              every tensor whole to REF
    torchrun ... fsdp2_job.py load ROOT REF   (any world size) loads the
                                              newest step into a fresh model
                                              and optimizer and compares
                                              every tensor with REF, bit for
                                              bit
    torchrun ... fsdp2_job.py stateful-save ROOT REF, stateful-load ROOT REF
                                              the same with the model and
                                              optimizer given as they are
                                              (Stateful); the load into a
                                              fresh optimizer then steps
    torchrun ... fsdp2_job.py bad ROOT        a load of a damaged step must
                                              fail on every rank and change
                                              nothing
    torchrun ... fsdp2_job.py partial ROOT    a real Partial DTensor (each
                                              rank a part of the sum) is
                                              refused on every rank, saved
                                              or loaded into, and nothing is
                                              committed

A failure prints "rank R error: ..." and exits 1.
"""

import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import (
    DTensor,
    Partial,
    Replicate,
    Shard,
    distribute_tensor,
)

import ckpt
import ckpt.torch as ct


def fail(rank, what):
    print(f"rank {rank} error: {what}", file=sys.stderr, flush=True)
    sys.exit(1)


def make_model(seed, world):
    torch.manual_seed(seed)
    # 10 and 6 rows: uneven shards on 3 and 4 ranks.
    model = torch.nn.Sequential(torch.nn.Linear(5, 10), torch.nn.ReLU(),
                                torch.nn.Linear(10, 6))
    mesh = init_device_mesh("cpu", (world,))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def extra_dtensors(world, seed):
    """DTensors of their own: Replicate on a 1-D mesh, and on a 2-D mesh
    (4 ranks) Shard/Replicate, Replicate/Shard and Shard/Shard."""
    g = torch.Generator().manual_seed(seed)
    whole = {n: torch.randn(6, 8, generator=g) for n in ("r", "sr", "rs", "ss")}
    mesh1 = init_device_mesh("cpu", (world,))
    out = {"r": distribute_tensor(whole["r"], mesh1, [Replicate()])}
    if world == 4:
        mesh2 = init_device_mesh("cpu", (2, 2))
        layouts = {"sr": [Shard(0), Replicate()], "rs": [Replicate(), Shard(1)],
                   "ss": [Shard(0), Shard(1)]}
    else:
        # Another split of the same global tensors.
        layouts = {"sr": [Replicate()], "rs": [Shard(1)], "ss": [Shard(0)]}
        mesh2 = mesh1
    for name, placements in layouts.items():
        out[name] = distribute_tensor(whole[name], mesh2, placements)
    return out


def flat(tree, prefix=""):
    """{dotted name: tensor or value} of a nested state dict."""
    out = {}
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.update(flat(v, f"{prefix}{k}."))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            out.update(flat(v, f"{prefix}{i}."))
    else:
        out[prefix[:-1]] = tree
    return out


def whole(value):
    """A tensor's global value as NumPy (a DTensor gathered: collective)."""
    if isinstance(value, DTensor):
        value = value.full_tensor()
    return value.detach().cpu().numpy()


def state(model, opt, extra):
    msd, osd = get_state_dict(model, opt)
    return {"model": msd, "optim": osd, "extra": extra}


def snapshot(st):
    """{name: NumPy copy} of every tensor, and {name: value} of the rest."""
    tensors, others = {}, {}
    for name, v in sorted(flat(st).items()):
        if isinstance(v, torch.Tensor):
            tensors[name] = whole(v).copy()
        else:
            others[name] = v
    return tensors, others


def save(root, ref, rank, world):
    model, opt = make_model(0, world)
    torch.manual_seed(100 + rank)  # each rank its own batches
    for _ in range(3):
        loss = model(torch.randn(4, 5)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    st = state(model, opt, extra_dtensors(world, 7))
    ct.save(st, root, 3)
    tensors, _ = snapshot(st)
    if rank == 0:
        np.savez(ref, **tensors)


def load(root, ref, rank, world):
    model, opt = make_model(1, world)  # other weights, no Adam moments yet
    st = state(model, opt, extra_dtensors(world, 8))
    info = ct.load(st, root)
    if info.step != 3:
        fail(rank, f"loaded step {info.step}")
    set_state_dict(model, opt, model_state_dict=st["model"],
                   optim_state_dict=st["optim"])
    # What the model and optimizer hold now, asked afresh.
    got, _ = snapshot(state(model, opt, st["extra"]))
    want = dict(np.load(ref))
    if sorted(got) != sorted(want):
        fail(rank, f"entries {sorted(got)} != {sorted(want)}")
    for name, w in want.items():
        g = got[name]
        if g.dtype != w.dtype or g.shape != w.shape or \
                g.tobytes() != w.tobytes():
            fail(rank, f"{name} differs after the load")
    print(f"rank {rank} of {world} loaded {len(want)} tensors bit for bit",
          file=sys.stderr, flush=True)


def stateful_save(root, ref, rank, world):
    """The documented pattern: the model and optimizer given to ckpt.torch
    as they are (Stateful), not through get_state_dict."""
    model, opt = make_model(0, world)
    torch.manual_seed(100 + rank)
    for _ in range(3):
        model(torch.randn(4, 5)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    ct.save({"model": model, "optim": opt}, root, 3)
    tensors, _ = snapshot(state(model, opt, {}))
    if rank == 0:
        np.savez(ref, **tensors)


def stateful_load(root, ref, rank, world):
    """Into a fresh model and an optimizer without moments: ckpt.torch
    makes them, DTensors like the parameters, so that the next step runs."""
    model, opt = make_model(1, world)
    ct.load({"model": model, "optim": opt}, root)
    got, _ = snapshot(state(model, opt, {}))
    want = dict(np.load(ref))
    if sorted(got) != sorted(want):
        fail(rank, f"entries {sorted(got)} != {sorted(want)}")
    for name, w in want.items():
        if got[name].tobytes() != w.tobytes() or got[name].shape != w.shape:
            fail(rank, f"{name} differs after the load")
    for moments in opt.state.values():
        for key, v in moments.items():
            if key != "step" and not isinstance(v, DTensor):
                fail(rank, f"moment {key} is a {type(v).__name__}")
    model(torch.randn(4, 5)).square().mean().backward()
    opt.step()  # raised "mixed torch.Tensor and DTensor" before
    print(f"rank {rank} of {world} loaded the Stateful pair bit for bit "
          f"and stepped", file=sys.stderr, flush=True)


def bad(root, rank, world):
    model, opt = make_model(2, world)
    st = state(model, opt, extra_dtensors(world, 9))
    before, before_other = snapshot(st)
    try:
        ct.load(st, root)
    except ckpt.DataLoss as e:
        print(f"rank {rank} refused: {e}", file=sys.stderr, flush=True)
    else:
        fail(rank, "a damaged step loaded")
    after, after_other = snapshot(st)
    if before_other != after_other or sorted(before) != sorted(after) or any(
            before[n].tobytes() != after[n].tobytes() for n in before):
        fail(rank, "a failed load changed the state")


def partial(root, rank, world):
    mesh = init_device_mesh("cpu", (world,))
    # Each rank holds ones: the DTensor's value is world * ones.
    dt = DTensor.from_local(torch.ones(4), mesh, [Partial()])
    for what in ("save", "load"):
        try:
            if what == "save":
                ct.save({"p": dt}, root, 1)
            else:
                ct.save({"p": torch.zeros(4)}, root, 2)
                ct.load({"p": dt}, root)
        except ckpt.InvalidArgument as e:
            if "Partial" not in str(e):
                fail(rank, f"{what}: not about the Partial: {e}")
            print(f"rank {rank} refused the Partial ({what})",
                  file=sys.stderr, flush=True)
        else:
            fail(rank, f"a Partial DTensor was {what}d")
    if ct.latest(root) != 2:
        fail(rank, f"steps {ct.latest(root)}: the Partial's save committed")
    if dt.to_local().tolist() != [1.0] * 4:
        fail(rank, "the refused load changed the Partial's local value")


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    op, root = sys.argv[1], sys.argv[2]
    if op == "save":
        save(root, sys.argv[3], rank, world)
    elif op == "load":
        load(root, sys.argv[3], rank, world)
    elif op == "stateful-save":
        stateful_save(root, sys.argv[3], rank, world)
    elif op == "stateful-load":
        stateful_load(root, sys.argv[3], rank, world)
    elif op == "bad":
        bad(root, rank, world)
    elif op == "partial":
        partial(root, rank, world)
    else:
        fail(rank, f"unknown operation {op}")
    ct.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
