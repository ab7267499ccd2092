"""The memory an all-or-nothing load into new tensors (ckpt.torch.load)
reads into is kept by the manager for its next load, and given back at a
save: reusing it never mixes one load's bytes into another, a load while
it is lent takes memory of its own, and an undone load puts back every
tensor, those that share memory too."""

import pytest

import ckpt

torch = pytest.importorskip("torch")
import ckpt.torch as ct  # noqa: E402 - after the skip
from test_all_or_nothing import Refuses  # noqa: E402 - raises when loaded

MIB = 1 << 20


@pytest.fixture(autouse=True)
def _close_managers():
    yield
    ct.close()


def state_of(value):
    """Tensors of 1 MiB and up (pages of their own in the kept memory), a
    small one, a bfloat16 one and an empty one."""
    return {"big": torch.full((MIB // 4,), float(value)),
            "wide": torch.full((3, MIB // 8), value, dtype=torch.int16),
            "small": torch.full((5,), value, dtype=torch.int64),
            "half": torch.full((77,), float(value), dtype=torch.bfloat16),
            "none": torch.empty(0, 4)}


def assert_holds(state, value):
    for name, t in state.items():
        assert torch.equal(t, state_of(value)[name]), name


def kept(mgr):
    buffer = mgr._load_memory._buffer
    return None if buffer is None else buffer.data_ptr()


def test_loads_reuse_the_kept_memory_and_each_gets_its_own_bytes(root):
    mgr = ct.manager(root)
    for step in (1, 2, 3):
        ct.save(state_of(step), mgr, step)
    state = state_of(0)
    where = {k: t.data_ptr() for k, t in state.items() if t.numel()}
    ct.load(state, mgr, 2)
    assert_holds(state, 2)
    memory = kept(mgr)
    assert memory is not None, "the first load kept no memory"
    for step in (1, 3, 1):
        ct.load(state, mgr, step)
        assert_holds(state, step)
        assert kept(mgr) == memory, "a later load mapped memory anew"
    # In place all along: the state's tensors were never replaced.
    assert where == {k: t.data_ptr() for k, t in state.items() if t.numel()}


def test_a_save_gives_the_memory_back(root):
    mgr = ct.manager(root)
    ct.save(state_of(1), mgr, 1)
    state = state_of(0)
    ct.load(state, mgr, 1)
    assert kept(mgr) is not None
    ct.save(state, mgr, 2)
    assert kept(mgr) is None
    ct.load(state, mgr, 1)
    handle = ct.async_save(state, mgr, 3)
    assert kept(mgr) is None
    handle.wait()
    ct.load(state, mgr, 3)
    assert_holds(state, 1)
    mgr.close()
    assert kept(mgr) is None


def test_a_save_through_the_tiers_gives_the_memory_back(root, tmp_path):
    mgr = ct.manager(root)
    ct.save(state_of(1), mgr, 1)
    state = state_of(0)
    ct.load(state, mgr, 1)
    assert kept(mgr) is not None
    with mgr.tiers(f"file://{tmp_path}/local", replicas=0) as tiers:
        tiers.save(2, state)
    assert kept(mgr) is None


def test_a_load_while_the_memory_is_lent_leaves_it_alone(root):
    mgr = ct.manager(root)
    ct.save(state_of(1), mgr, 1)
    ct.save(state_of(2), mgr, 2)
    state = state_of(0)
    ct.load(state, mgr, 1)  # the memory is mapped and kept
    lease = mgr._load_memory.lend([4 * MIB])
    assert lease is not None
    held = lease.empty_like(torch.empty(MIB))
    held.fill_(-7.0)
    del lease  # the tensor holds the lease
    ct.load(state, mgr, 2)
    assert_holds(state, 2)
    assert torch.equal(held, torch.full((MIB,), -7.0)), \
        "a load wrote into memory lent to another"
    del held
    assert mgr._load_memory.lend([MIB]) is not None, "never given back"


def test_a_bound_keeps_no_memory_above_it(root):
    mgr = ckpt.open(root, create=True, async_staging_bytes=MIB)
    ct.save(state_of(1), mgr, 1)
    state = state_of(0)
    ct.load(state, mgr, 1)
    assert_holds(state, 1)
    assert kept(mgr) is None


class Tied(torch.nn.Module):
    """Two entries of one tensor (tied weights), then an object whose
    load_state_dict() raises: the load is undone."""

    def __init__(self, value):
        super().__init__()
        self.a = torch.nn.Linear(64, 64, bias=False)
        self.b = torch.nn.Linear(64, 64, bias=False)
        self.b.weight = self.a.weight
        with torch.no_grad():
            self.a.weight.fill_(value)


def test_an_undone_load_puts_back_tensors_that_share_memory(root):
    saved = Tied(1.0)
    ct.save({"model": saved.state_dict(), "z": Refuses()}, root, 1)
    model = Tied(5.0)
    with pytest.raises(RuntimeError, match="refuses"):
        ct.load({"model": model.state_dict(), "z": Refuses()}, root, 1)
    assert torch.equal(model.a.weight, torch.full((64, 64), 5.0))
    assert model.a.weight.data_ptr() == model.b.weight.data_ptr()
    # And without the refusal it loads.
    ct.load({"model": model.state_dict()}, root, 1)
    assert torch.equal(model.b.weight, torch.full((64, 64), 1.0))
