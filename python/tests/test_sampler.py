"""ckpt.torch.Sampler: a data position that survives a change of world
size. Ranks are simulated in one process (num_replicas and rank given), and
one real torchrun job of 4 processes resumes on 3 (torchrun_sampler_job.py
is the job)."""

import os
import warnings

import pytest

import torchrun_util

try:
    import torch
except ImportError as e:
    torchrun_util.skip_module("test_sampler.py",
                              f"PyTorch is not importable ({e})")

import ckpt  # noqa: E402 - after the skip
import ckpt.torch  # noqa: E402
from ckpt import _torch_sampler  # noqa: E402

# torchdata's own deprecation notice, not this module's concern.
pytestmark = pytest.mark.filterwarnings(
    "ignore:'set_vital' is deprecated:UserWarning")

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "torchrun_sampler_job.py")


def stateful_dataloader():
    """torchdata's StatefulDataLoader, or a skip saying why."""
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError as e:
        why = f"torchdata is not importable ({e}): no StatefulDataLoader"
        warnings.warn(pytest.PytestWarning(f"skipped: {why}"))
        pytest.skip(why)
    return StatefulDataLoader


def samplers(n, world, **kw):
    return [ckpt.torch.Sampler(n, num_replicas=world, rank=r, **kw)
            for r in range(world)]


def take(iterators, count):
    """`count` indices from each rank's iterator (fewer where it ends)."""
    out = []
    for it in iterators:
        for _ in range(count):
            index = next(it, None)
            if index is None:
                break
            out.append(index)
    return out


def test_the_order_is_the_cpp_samplers():
    # ckpt::SplitMix64{0}'s reference numbers, and the first samples of
    # ckpt::Sampler(1000, 123) in epochs 0 and 1 (include/ckpt/sampler.h).
    assert _torch_sampler.splitmix64(0, 2) == [0xE220A8397B1DCDAF,
                                               0x6E789E6AA1B965F4]
    perm = _torch_sampler.permutation(1000, 123, 0)
    assert list(perm[:10]) == [161, 309, 785, 484, 114, 744, 436, 17, 711,
                               395]
    assert sorted(perm) == list(range(1000))
    assert list(_torch_sampler.permutation(1000, 123, 1)[:4]) != \
        list(perm[:4])


def test_the_order_is_a_function_of_seed_and_epoch_alone(monkeypatch):
    with_numpy = [list(_torch_sampler.permutation(n, 9, e))
                  for n in (0, 1, 2, 5, 70000) for e in (0, 3)]
    monkeypatch.setattr(_torch_sampler, "_np", None)  # the pure-Python draws
    assert with_numpy == [list(_torch_sampler.permutation(n, 9, e))
                          for n in (0, 1, 2, 5, 70000) for e in (0, 3)]
    a, b = ckpt.torch.Sampler(50, seed=4), ckpt.torch.Sampler(50, seed=4)
    b.set_epoch(1)
    b.set_epoch(0)
    assert list(a) == list(b)
    a.set_epoch(1)
    assert list(a) != list(b) and sorted(a) == sorted(b)


def test_a_drop_in_for_distributed_sampler():
    from torch.utils.data.distributed import DistributedSampler
    data = list(range(24))
    for r in range(4):
        mine = ckpt.torch.Sampler(data, num_replicas=4, rank=r, shuffle=False)
        theirs = DistributedSampler(data, num_replicas=4, rank=r,
                                    shuffle=False)
        assert isinstance(mine, DistributedSampler)
        assert list(mine) == list(theirs) and len(mine) == len(theirs) == 6
    alone = ckpt.torch.Sampler(10)  # no process group: one rank
    assert (alone.num_replicas, alone.rank, len(alone)) == (1, 0, 10)
    with pytest.raises(ckpt.InvalidArgument, match="rank 4 is outside"):
        ckpt.torch.Sampler(10, num_replicas=4, rank=4)


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [False, True])
def test_four_ranks_resume_on_three_and_the_epoch_is_taken_once(
        shuffle, drop_last):
    n, kw = 103, dict(shuffle=shuffle, drop_last=drop_last, seed=11)
    four = samplers(n, 4, **kw)
    for s in four:
        s.set_epoch(2)
    assert [len(s) for s in four] == ([25] * 4 if drop_last else
                                      [26, 26, 26, 25])
    seen = take([iter(s) for s in four], 10)
    states = [s.state_dict() for s in four]
    assert all(st == states[0] for st in states)  # one position for the job
    assert states[0]["epoch"] == 2 and states[0]["position"] == 40

    three = samplers(n, 3, **kw)
    for s in three:
        s.load_state_dict(states[0])
        s.set_epoch(2)  # the same epoch: it goes on
    assert [len(s) for s in three] == ([21] * 3 if drop_last else
                                       [21, 21, 21])
    seen += take([iter(s) for s in three], 1000)

    order = list(_torch_sampler.permutation(n, 11, 2)) if shuffle else \
        list(range(n))
    assert len(seen) == len(set(seen))  # nothing twice
    if drop_last:
        # 63 left for 3 ranks: 21 each; nothing of the epoch is left out.
        assert sorted(seen) == sorted(order[:40 + 63])
    else:
        assert sorted(seen) == list(range(n))
    assert all(s.state_dict()["position"] == n for s in three)


def test_drop_last_leaves_out_less_than_a_round():
    n = 10
    four = samplers(n, 4, drop_last=True, shuffle=False)
    seen = take([iter(s) for s in four], 1)
    states = [s.state_dict() for s in four]
    assert {st["position"] for st in states} == {4}
    three = samplers(n, 3, drop_last=True, shuffle=False)
    for s in three:
        s.load_state_dict(states[0])
    seen += take([iter(s) for s in three], 100)
    assert sorted(seen) == list(range(4)) + list(range(4, 10))  # 6 = 2 rounds
    again = samplers(n, 4, drop_last=True, shuffle=False)
    for s in again:
        s.load_state_dict(states[0])  # 6 left, 4 ranks: 1 round, 2 left out
    assert sorted(take([iter(s) for s in again], 100)) == [4, 5, 6, 7]


def test_a_stateful_dataloader_resumes_on_another_world_size():
    StatefulDataLoader = stateful_dataloader()
    data = list(range(90))

    def loaders(world):
        out = []
        for r in range(world):
            s = ckpt.torch.Sampler(data, num_replicas=world, rank=r, seed=3)
            s.set_epoch(1)
            out.append(StatefulDataLoader(data, sampler=s, batch_size=4))
        return out

    seen = []
    two = loaders(2)
    its = [iter(loader) for loader in two]
    for _ in range(5):
        for it in its:
            seen += next(it).tolist()
    saved = [loader.state_dict() for loader in two]
    assert saved[0] == saved[1]
    three = loaders(3)
    for loader in three:
        loader.load_state_dict(saved[0])
    for loader in three:
        seen += [i for batch in loader for i in batch.tolist()]
    assert sorted(seen) == data


def test_a_stateful_dataloader_counts_what_its_consumer_took():
    # Workers draw ahead of the loop; StatefulDataLoader's state is the
    # sampler's as of the batches delivered.
    StatefulDataLoader = stateful_dataloader()
    data = list(range(64))
    s = ckpt.torch.Sampler(data, num_replicas=2, rank=0, shuffle=False)
    loader = StatefulDataLoader(data, sampler=s, batch_size=2, num_workers=2,
                                prefetch_factor=4)
    it = iter(loader)
    got = [next(it).tolist() for _ in range(3)]
    assert got == [[0, 2], [4, 6], [8, 10]]
    assert s.state_dict()["position"] > 12  # the workers drew ahead
    state = loader.state_dict()
    del it
    fresh = ckpt.torch.Sampler(data, num_replicas=1, rank=0, shuffle=False)
    # (A loader's state is for a loader of as many workers.)
    again = StatefulDataLoader(data, sampler=fresh, batch_size=2,
                               num_workers=2)
    again.load_state_dict(state)
    # Rank 1 took 1, 3, 5, ... 11 too: one rank goes on from 12.
    assert next(iter(again)).tolist() == [12, 13]


def test_a_plain_dataloader_passes_what_it_consumed():
    data = list(range(40))
    s = ckpt.torch.Sampler(data, num_replicas=2, rank=1, shuffle=False)
    loader = torch.utils.data.DataLoader(data, sampler=s, batch_size=3,
                                         num_workers=1, prefetch_factor=4)
    it = iter(loader)
    assert next(it).tolist() == [1, 3, 5] and next(it).tolist() == [7, 9, 11]
    state = s.state_dict(consumed=2 * 3)
    del it
    assert state["position"] == 12
    with pytest.raises(ckpt.InvalidArgument, match="consumed=-1"):
        s.state_dict(consumed=-1)


def test_epochs_restart_and_a_finished_epoch_stays_finished():
    s = ckpt.torch.Sampler(8, seed=1)
    first = list(s)
    assert list(s) == first  # no set_epoch: the same epoch again
    assert s.state_dict()["position"] == 8
    it = iter(s)
    next(it)
    next(it)
    s.set_epoch(0)  # the epoch it is in: it goes on
    assert s.state_dict()["position"] == 2
    done = ckpt.torch.Sampler(8, seed=1)
    done.load_state_dict({**s.state_dict(), "position": 8})
    assert len(done) == 0 and list(done) == []  # nothing more of epoch 0
    done.set_epoch(1)
    assert sorted(done) == list(range(8))

    # StatefulDataLoader restores its sampler when the iteration starts,
    # after the loop's set_epoch: a later epoch starts afresh.
    later = ckpt.torch.Sampler(8, seed=1)
    later.set_epoch(1)
    later.load_state_dict({**s.state_dict(), "position": 5})
    assert later.epoch == 1 and len(later) == 8
    earlier = ckpt.torch.Sampler(8, seed=1)
    earlier.load_state_dict({**s.state_dict(), "epoch": 3, "position": 5})
    assert earlier.epoch == 3 and len(earlier) == 3


def test_a_dataloader_saved_at_the_end_of_an_epoch_starts_the_next():
    StatefulDataLoader = stateful_dataloader()
    data = list(range(12))
    s = ckpt.torch.Sampler(data, seed=5)
    loader = StatefulDataLoader(data, sampler=s, batch_size=5)
    s.set_epoch(0)
    assert sum(len(b) for b in loader) == 12
    saved = loader.state_dict()
    s2 = ckpt.torch.Sampler(data, seed=5)
    resumed = StatefulDataLoader(data, sampler=s2, batch_size=5)
    resumed.load_state_dict(saved)
    s2.set_epoch(1)
    assert sorted(i for b in resumed for i in b.tolist()) == data
    assert s2.epoch == 1


def test_the_state_goes_into_a_ckpt_root_as_metadata(tmp_path):
    s = ckpt.torch.Sampler(30, num_replicas=2, rank=0, seed=2**40 + 1)
    s.set_epoch(4)
    take([iter(s)], 5)
    with ckpt.open(tmp_path / "root", create=True) as mgr:
        mgr.save(1, {"sampler": s.state_dict()})
        loaded = mgr.load()["sampler"]
    assert loaded == s.state_dict() == {
        "epoch": 4, "position": 10, "dataset_len": 30, "seed": 2**40 + 1,
        "shuffle": True}
    back = ckpt.torch.Sampler(30, num_replicas=3, rank=2, seed=2**40 + 1)
    back.load_state_dict(loaded)
    assert (back.epoch, len(back)) == (4, 6)


def test_a_state_of_another_data_set_is_refused():
    state = ckpt.torch.Sampler(30, seed=2).state_dict()
    with pytest.raises(ckpt.InvalidArgument,
                       match="state is of 30 samples, seed 2.*this sampler "
                             "has 31 samples"):
        ckpt.torch.Sampler(31, seed=2).load_state_dict(state)
    with pytest.raises(ckpt.InvalidArgument, match="shuffle=False"):
        ckpt.torch.Sampler(30, seed=2, shuffle=False).load_state_dict(state)
    with pytest.raises(ckpt.InvalidArgument, match="no 'position'"):
        ckpt.torch.Sampler(30, seed=2).load_state_dict({"epoch": 0})
    with pytest.raises(ckpt.InvalidArgument, match="position 40 is outside"):
        ckpt.torch.Sampler(30, seed=2).load_state_dict(
            {**state, "position": 40})


def test_a_torchrun_job_of_4_resumes_on_3(tmp_path):
    torchrun_util.skip_without_torchrun("test_sampler.py")
    stateful_dataloader()  # the job's loader
    root, out = tmp_path / "root", tmp_path / "seen"
    out.mkdir()
    n = 150
    for procs, phase in ((4, "first"), (3, "second")):
        rc, stdout, stderr = torchrun_util.torchrun(
            procs, JOB, [phase, root, out, n])
        assert rc == 0, f"{phase} job exited {rc}:\n{stdout}{stderr}"
    seen = {}
    for name in sorted(os.listdir(out)):
        with open(out / name) as f:
            seen[name] = [int(x) for x in f.read().split()]
    assert sorted(seen) == [f"first-{r}" for r in range(4)] + \
        [f"second-{r}" for r in range(3)]
    # The first job took 3 batches of 5 on each of its 4 ranks.
    assert all(len(seen[f"first-{r}"]) == 15 for r in range(4))
    everything = [i for indices in seen.values() for i in indices]
    assert sorted(everything) == list(range(n))  # each sample once
