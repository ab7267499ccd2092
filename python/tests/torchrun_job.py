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
  tsave ROOT        ckpt.torch.save (step 5) and async_save (step 6) of a
                    replicated model and its Adam optimizer (Stateful), a
                    DTensor (test double) sharded over a 2-d mesh at 4 ranks
                    and a 1-d one otherwise, and a ShardedTensor (test
                    double) split by rows, a rank holding none at 4 ranks
  tload ROOT        ckpt.torch.load of step 6 into fresh objects: the DTensor
                    in another layout (Shard(1), or Shard(1) x Replicate on a
                    2 x 2 mesh at 4 ranks), the rows split over the ranks
                    that run now; checks every value bit for bit
  trefused ROOT     ckpt.torch.load of step 6 where rank 1's model's
                    load_state_dict() raises: every rank must raise (printed
                    as "rank R refused CLASS: message") and change nothing
  real ROOT         where this PyTorch can make them: a real ShardedTensor
                    (ChunkShardingSpec by rows) saved with ckpt.torch and
                    loaded back into another, bit for bit
  gsave ROOT        on a GPU: every rank saves its rows of "w" and a model
                    with its Adam optimizer from GPU memory (step 8)
  gload ROOT        on a GPU: every rank fills its rows of "w", split over
                    however many ranks run now, and the model and optimizer
                    in GPU memory from step 8, and checks them bit for bit
  tiers ROOT LOCAL  Tiers over ROOT with the local tier LOCAL ({node} in it),
                    ranks on nodes rank % 2, one replica: steps 1 to 4 with
                    save_async, the durable tier every 3 steps
  trestore ROOT LOCAL TIER STEP FETCHED
                    Tiers.restore into zeros, split over the ranks that run
                    now: the tier, the step and the ranks fetched from peers
                    must be these, and every value that step's, bit for bit
  tbad ROOT         ckpt.torch.save and async_save where rank 1's state
                    cannot be saved (its object's state_dict() raises, then
                    a Partial DTensor): every rank gets the same error
                    (printed as for bad), nothing is committed

  silent SECONDS    a communicator with a timeout of SECONDS: rank 1 stays
                    away from a barrier longer than that; every other
                    rank's barrier must fail with ckpt.Unavailable within
                    the timeout and a few seconds

Exits 1 on any mismatch. Several operations in one job save starting
PyTorch (the slow part) more than once.
"""

import os
import sys

import torch
import torch.distributed as dist

import ckpt
import ckpt.torch as ct

import sharded_doubles as sd
from silent_rank import silent_rank

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


def report(rank, error):
    # One write, so that the ranks' lines do not interleave.
    sys.stderr.write(f"rank {rank} error {type(error).__name__}: {error}\n")
    sys.stderr.flush()


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
        report(rank, e)
    else:
        fail(rank, "a save with another shape on rank 1 succeeded")
    # Nothing was committed, so nothing made the root: reading it is
    # NotFound, as a mistyped root's is.
    try:
        listed = mgr.list()
    except ckpt.NotFound:
        pass
    else:
        fail(rank, f"the root exists after failed saves: {listed}")


def trained_model(steps):
    """A model and its Adam optimizer, trained the same way on every rank."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(),
                                torch.nn.Linear(7, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        loss = model(torch.randn(3, 5, generator=g)).square().sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, opt


def dtensor_whole():
    return torch.arange(7 * 5, dtype=torch.float64).reshape(7, 5).sqrt()


def rows_whole():
    return torch.arange(3 * 3, dtype=torch.int32).reshape(3, 3) - 4


def sharded_state(rank, size, model, opt, save_layout):
    if save_layout:
        mesh_shape = [2, 2] if size == 4 else [size]
        placements = [sd.Shard(0), sd.Shard(1)][:len(mesh_shape)]
    elif size == 4:
        mesh_shape, placements = [2, 2], [sd.Shard(1), sd.Replicate()]
    else:
        mesh_shape, placements = [size], [sd.Shard(1)]
    mesh = sd.DeviceMesh(mesh_shape, rank)
    w2 = dtensor_whole() if save_layout else torch.zeros(7, 5,
                                                         dtype=torch.float64)
    rows = rows_whole() if save_layout else torch.zeros(3, 3,
                                                        dtype=torch.int32)
    # Plain lists and tuples of another length than saved are replaced.
    return {"model": model, "optim": opt,
            "sharded": {"w2": sd.distribute(w2, mesh, placements),
                        "rows": sd.chunk_rows(rows, rank, size)},
            "step": 5 if save_layout else 0,
            "hist": [0.5, 0.25, 0.125] if save_layout else [],
            "pair": (1, "two") if save_layout else (0,)}


def tsave(root, rank, size):
    model, opt = trained_model(3)
    state = sharded_state(rank, size, model, opt, True)
    if rank == 3 and state["sharded"]["rows"].local_shards():
        fail(rank, "the test means rank 3 to hold no row")
    ct.save(state, root, 5, epoch=2)
    ct.async_save(state, root, 6, metrics={"loss": 0.5}).wait()
    if ct.latest(root) != 6:
        fail(rank, f"latest is {ct.latest(root)}")


def tload(root, rank, size):
    model, opt = trained_model(0)
    state = sharded_state(rank, size, model, opt, False)
    info = ct.load(state, root)
    if info.step != 6 or state["step"] != 5:
        fail(rank, f"loaded step {info.step}, step entry {state['step']}")
    if state["hist"] != [0.5, 0.25, 0.125] or state["pair"] != (1, "two"):
        fail(rank, f"loaded hist {state['hist']}, pair {state['pair']}")
    ref_model, ref_opt = trained_model(3)
    for (name, got), want in zip(model.state_dict().items(),
                                 ref_model.state_dict().values()):
        if not same_bits(got, want):
            fail(rank, f"model {name} differs")
    got, want = opt.state_dict()["state"], ref_opt.state_dict()["state"]
    if sorted(got) != sorted(want) or any(
            not same_bits(got[i][k], want[i][k])
            for i in want for k in ("exp_avg", "exp_avg_sq")):
        fail(rank, "the optimizer's moments differ")
    w2, rows = state["sharded"]["w2"], state["sharded"]["rows"]
    expected = sd.distribute(dtensor_whole(), w2.device_mesh, w2.placements)
    if not same_bits(w2.to_local(), expected.to_local()):
        fail(rank, f"DTensor shard differs {w2.to_local()}")
    for mine, want in zip(rows.local_shards(),
                          sd.chunk_rows(rows_whole(), rank,
                                        size).local_shards()):
        if not same_bits(mine.tensor, want.tensor):
            fail(rank, "ShardedTensor shard differs")


def trefused(root, rank, size):
    """ckpt.torch.load of step 6 where rank 1's model refuses its state
    (load_state_dict raises): every rank raises (rank 1 its own error, the
    others ckpt.Aborted) and no rank changes anything."""
    model, opt = trained_model(0)
    state = sharded_state(rank, size, model, opt, False)
    if rank == 1:
        def refuse(*args, **kwargs):
            raise ValueError("this model refuses its state on rank 1")
        model.load_state_dict = refuse
    before = [p.detach().clone() for p in model.parameters()]
    w2 = state["sharded"]["w2"].to_local().clone()
    try:
        ct.load(state, root)
    except Exception as e:  # noqa: BLE001 - its class is the point
        sys.stderr.write(f"rank {rank} refused {type(e).__name__}: {e}\n")
        sys.stderr.flush()
    else:
        fail(rank, "the load succeeded though rank 1's model refused it")
    if any(not same_bits(p.detach(), b)
           for p, b in zip(model.parameters(), before)):
        fail(rank, "the model changed")
    if opt.state_dict()["state"]:
        fail(rank, "the optimizer gained moments")
    if state["step"] != 0 or not same_bits(state["sharded"]["w2"].to_local(),
                                           w2):
        fail(rank, "the state changed")
    if state["hist"] != [] or state["pair"] != (0,):
        fail(rank, "the lists and tuples changed")


def real(root, rank, size):
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec
    spec = ChunkShardingSpec(
        dim=0, placements=[f"rank:{r}/cpu" for r in range(size)])
    whole = rows_whole()
    saved = sharded_tensor.empty(spec, *whole.shape, dtype=whole.dtype)
    for shard in saved.local_shards():
        lo = shard.metadata.shard_offsets[0]
        shard.tensor.copy_(whole[lo:lo + shard.tensor.shape[0]])
    ct.save({"rows": saved}, root, 1)
    loaded = sharded_tensor.empty(spec, *whole.shape, dtype=whole.dtype)
    ct.load({"rows": loaded}, root)
    for shard in loaded.local_shards():
        lo = shard.metadata.shard_offsets[0]
        if not same_bits(shard.tensor, whole[lo:lo + shard.tensor.shape[0]]):
            fail(rank, "a real ShardedTensor's shard differs")


def gpu():
    return torch.device("cuda", int(os.environ["LOCAL_RANK"]) %
                        torch.cuda.device_count())


def gpu_state(rank, size, filled):
    lo, hi = my_rows(rank, size)
    rows = expected()[lo:hi] if filled else torch.zeros(hi - lo, COLS)
    model, opt = trained_model(3 if filled else 0)
    model.to(gpu())
    # The moments follow their parameters onto the device, as after a
    # model.to() before the optimizer's first step.
    for s in opt.state.values():
        for k, v in s.items():
            if torch.is_tensor(v) and k != "step":
                s[k] = v.to(gpu())
    return {"w": ckpt.Shard(rows.to(gpu()), [lo, 0], [ROWS, COLS]),
            "model": model, "optim": opt}


def gsave(root, rank, size):
    state = gpu_state(rank, size, True)
    ct.async_save(state, root, 8, stage_in_background=True).wait()


def gload(root, rank, size):
    state = gpu_state(rank, size, False)
    ct.load(state, root)
    lo, hi = my_rows(rank, size)
    if state["w"].value.device != gpu() or not same_bits(
            state["w"].value.cpu(), expected()[lo:hi]):
        fail(rank, "GPU shard differs")
    ref_model, ref_opt = trained_model(3)
    for (name, got), want in zip(state["model"].state_dict().items(),
                                 ref_model.state_dict().values()):
        if got.device != gpu() or not same_bits(got.cpu(), want):
            fail(rank, f"model {name} differs")
    got = state["optim"].state_dict()["state"]
    want = ref_opt.state_dict()["state"]
    if any(not same_bits(got[i][k].cpu(), want[i][k])
           for i in want for k in ("exp_avg", "exp_avg_sq")):
        fail(rank, "the optimizer's moments differ")


def tier_state(rank, size, step):
    lo, hi = my_rows(rank, size)
    rows = (expected()[lo:hi] + step) if step else torch.zeros(hi - lo, COLS)
    return {"w": ckpt.Shard(rows, [lo, 0], [ROWS, COLS]),
            "bias": bias() * step if step else torch.zeros(5,
                                                           dtype=torch.float64),
            "step": step}


def open_tiers(root, local, size, comm):
    mgr = ckpt.open(root, communicator=comm, job_id="torchrun-tiers")
    nodes = [r % 2 for r in range(size)]
    return mgr.tiers(local, local_every=1, durable_every=3,
                     replicas=1 if size > 1 else 0, nodes=nodes,
                     replication_rate=64 << 20)


def tiers(root, local, rank, size, comm):
    with open_tiers(root, local, size, comm) as t:
        if t.node != rank % 2:
            fail(rank, f"node {t.node}")
        handle = None
        for step in range(1, 5):
            handle = t.save_async(step, tier_state(rank, size, step))
            r = handle.wait()
            if not r.local or r.local_error or r.durable != (step == 3):
                fail(rank, f"step {step}: {r} {r.local_error}")


def trestore(root, local, rank, size, comm, tier, step, fetched):
    with open_tiers(root, local, size, comm) as t:
        state = tier_state(rank, size, 0)
        r = t.restore(state)
        if (r.tier, r.step, r.ranks_fetched) != (tier, step, fetched):
            fail(rank, f"restored {r} {r.local_skipped}")
        want = tier_state(rank, size, step)
        if not same_bits(state["w"].value, want["w"].value) or not same_bits(
                state["bias"], want["bias"]) or state["step"] != step:
            fail(rank, f"values differ after restoring step {step}")


class Broken:
    def state_dict(self):
        raise RuntimeError("this object cannot say its state")

    def load_state_dict(self, state):
        pass


def tbad(root, rank, size):
    mesh = sd.DeviceMesh([size], rank)
    partial = sd.DTensor(torch.zeros(2), [2], mesh, [sd.Partial()])
    for i, bad_leaf in enumerate((Broken(), partial)):
        state = {"x": torch.ones(3), "odd": bad_leaf if rank == 1 else 0}
        try:
            if i == 0:
                ct.save(state, root, 1)
            else:
                ct.async_save(state, root, 1).wait()
        except ckpt.Error as e:
            report(rank, e)
        else:
            fail(rank, "a save with a bad leaf on rank 1 succeeded")
    try:
        fail(rank, f"the root exists after failed saves: {ct.latest(root)}")
    except ckpt.NotFound:
        pass  # nothing was committed, so nothing made the root


def silent(timeout, rank):
    why = silent_rank(ckpt.torch_communicator(timeout=timeout), timeout, fail)
    if why is None:
        return
    if "Timed out" not in why:
        fail(rank, f"not gloo's timeout: {why}")
    print(f"rank {rank} timed out: {why}", file=sys.stderr)


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
        elif op == "tsave":
            tsave(root, rank, size)
        elif op == "tload":
            tload(root, rank, size)
        elif op == "trefused":
            trefused(root, rank, size)
        elif op == "real":
            real(root, rank, size)
        elif op == "gsave":
            gsave(root, rank, size)
        elif op == "gload":
            gload(root, rank, size)
        elif op == "tiers":
            tiers(root, args[0], rank, size, comm)
            args = args[1:]
        elif op == "trestore":
            trestore(root, args[0], rank, size, comm, args[1], int(args[2]),
                     int(args[3]))
            args = args[4:]
        elif op == "tbad":
            tbad(root, rank, size)
        elif op == "silent":
            silent(float(root), rank)
        else:
            fail(rank, f"unknown operation {op}")
    comm.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
