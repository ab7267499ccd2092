"""ckpt.torch: save, load and async_save of torch state dicts in place,
Stateful objects (a model and its Adam optimizer), nested containers, and
sharded leaves (DTensor and ShardedTensor, through their test doubles).
Many-rank jobs of the same calls run under torchrun in test_torchrun.py."""

import collections

import pytest
import torch

import ckpt
import ckpt.torch as ct

import sharded_doubles as sd


def same_bits(a, b):
    return (a.dtype == b.dtype and a.shape == b.shape
            and a.contiguous().view(torch.uint8).numpy().tobytes()
            == b.contiguous().view(torch.uint8).numpy().tobytes())


@pytest.fixture(autouse=True)
def let_go_of_managers():
    yield
    ct.close()


def model_and_adam(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.8, 0.95))
    return model, opt


def train(model, opt, steps, seed=7):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(5, 6, generator=g)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


class Counter:
    """A Stateful object of the program's own."""

    def __init__(self):
        self.seen, self.name = 0, "counter"

    def state_dict(self):
        return {"seen": self.seen, "name": self.name,
                "hist": torch.zeros(4, dtype=torch.int64) + self.seen}

    def load_state_dict(self, state):
        self.seen, self.name = state["seen"], state["name"]
        self.hist = state["hist"]


def test_a_model_and_a_fresh_adam_resume_bit_identically(root):
    model, opt = model_and_adam(0)
    train(model, opt, 3)
    counter = Counter()
    counter.seen = 3
    result = ct.save({"model": model, "optim": opt, "counter": counter,
                      "step": 3}, root, 3, epoch=1, metrics={"loss": 0.5})
    assert result.info.step == 3 and result.info.epoch == 1
    # Go on from there: the reference.
    train(model, opt, 2, seed=8)
    expected = {k: v.clone() for k, v in model.state_dict().items()}

    # A new process would build fresh objects; Adam has no moments yet.
    model2, opt2 = model_and_adam(1)
    assert opt2.state_dict()["state"] == {}
    params_before = [p.data_ptr() for p in model2.parameters()]
    counter2 = Counter()
    state = {"model": model2, "optim": opt2, "counter": counter2, "step": 0}
    info = ct.load(state, root)
    assert info.step == 3 and info.metrics == {"loss": 0.5}
    assert state["step"] == 3  # a scalar is replaced in the caller's dict
    assert (counter2.seen, counter2.name) == (3, "counter")
    assert torch.equal(counter2.hist, torch.full((4,), 3))
    # The parameters were filled in place, not replaced.
    assert [p.data_ptr() for p in model2.parameters()] == params_before
    loaded = opt2.state_dict()
    assert loaded["param_groups"][0]["betas"] == (0.8, 0.95)
    assert sorted(loaded["state"]) == [0, 1, 2, 3]
    train(model2, opt2, 2, seed=8)
    for name, t in model2.state_dict().items():
        assert same_bits(t, expected[name]), name


def test_nested_dicts_lists_and_tuples_are_filled_in_place(root):
    w = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    saved = {"a": {"w": w, "b": [torch.ones(2, dtype=torch.bfloat16), "x"]},
             "t": (1, 2.5, torch.tensor([7])), "blob": b"bytes"}
    ct.save(saved, root, 1)
    target = {"a": {"w": torch.zeros(3, 4),
                    "b": [torch.zeros(2, dtype=torch.bfloat16), ""]},
              "t": (0, 0.0, torch.zeros(1, dtype=torch.int64)),
              "blob": b""}
    w_target, t_target = target["a"]["w"], target["t"][2]
    inner = target["a"]
    ct.load(target, root)
    assert target["a"] is inner and target["a"]["w"] is w_target
    assert same_bits(w_target, w)
    assert target["a"]["b"][1] == "x" and target["blob"] == b"bytes"
    assert same_bits(target["a"]["b"][0], saved["a"]["b"][0])
    assert target["t"][:2] == (1, 2.5) and target["t"][2] is t_target
    assert int(t_target[0]) == 7


def test_a_namedtuple_and_an_ordered_dict_keep_their_types(root):
    Pair = collections.namedtuple("Pair", "lr momentum")
    ct.save({"hp": Pair(0.1, 0.9),
             "od": collections.OrderedDict(a=torch.ones(2))}, root, 1)
    target = {"hp": Pair(0.0, 0.0),
              "od": collections.OrderedDict(a=torch.zeros(2))}
    ct.load(target, root)
    assert target["hp"] == Pair(0.1, 0.9) and isinstance(target["hp"], Pair)
    assert torch.equal(target["od"]["a"], torch.ones(2))


def test_async_save_copies_before_returning(root):
    w = torch.arange(1000, dtype=torch.float64)
    handle = ct.async_save({"w": w}, root, 5)
    w += 1  # the training step goes on at once
    assert handle.wait().info.step == 5
    assert ct.latest(root) == 5
    target = {"w": torch.zeros(1000, dtype=torch.float64)}
    ct.load(target, root)
    assert torch.equal(target["w"], torch.arange(1000, dtype=torch.float64))


def test_the_handle_answers_result_as_dcps_future_does(root):
    # Code written for dcp.async_save calls .result() on what it returns.
    handle = ct.async_save({"w": torch.ones(4)}, root, 7)
    with pytest.raises(TypeError, match="timeout"):
        handle.result(timeout=5)
    assert handle.result().info.step == 7
    assert handle.result().info.step == 7  # every call, the same outcome
    assert ct.latest(root) == 7


def test_what_load_cannot_match_is_refused(root):
    with pytest.raises(ckpt.NotFound):
        ct.load({"w": torch.zeros(2)}, root)
    ct.save({"w": torch.zeros(2), "extra": 1}, root, 1)
    with pytest.raises(ckpt.InvalidArgument, match="extra"):
        ct.load({"w": torch.zeros(2)}, root, strict=True)
    with pytest.raises(ckpt.Error, match="w"):
        ct.load({"w": torch.zeros(3)}, root)
    model, _ = model_and_adam(0)
    ct.save({"model": model}, root, 2)
    bigger = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(),
                                 torch.nn.Linear(8, 3), torch.nn.Linear(3, 1))
    with pytest.raises(ckpt.InvalidArgument,
                       match=r"model\.3\.bias|model\.3\."):
        ct.load({"model": bigger}, root)


def test_a_state_the_checkpoint_does_not_fit_is_no_missing_checkpoint(root):
    # `except ckpt.NotFound: start afresh` must not catch a changed model:
    # a mismatch is InvalidArgument naming the root, the step and the entry.
    model, _ = model_and_adam(0)
    ct.save({"model": model, "w": torch.ones(2)}, root, 1)
    bigger = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(),
                                 torch.nn.Linear(8, 3), torch.nn.Linear(3, 1))
    before = {k: v.clone() for k, v in bigger.state_dict().items()}
    w = torch.zeros(2)
    for state, strict, entry in (
            ({"model": bigger, "w": w}, False, "model.3.bias"),
            ({"model": model, "w": w, "new": torch.zeros(1)}, False, "new"),
            ({"model": model, "w": w, "new": torch.zeros(1)}, True, "new"),
            ({"model": model}, True, "w")):
        with pytest.raises(ckpt.InvalidArgument) as e:
            ct.load(state, root, strict=strict)
        assert not isinstance(e.value, ckpt.NotFound)
        assert f"load step 1 from {root}: " in str(e.value)
        assert repr(entry) in str(e.value), str(e.value)
        assert "nothing was changed" in str(e.value)
    assert torch.equal(w, torch.zeros(2))
    for k, v in bigger.state_dict().items():
        assert same_bits(v, before[k]), k
    # NotFound stays for what is not there: a step, a root.
    with pytest.raises(ckpt.NotFound, match="step 9"):
        ct.load({"w": w}, root, 9)
    with pytest.raises(ckpt.NotFound, match="does not exist"):
        ct.load({"w": w}, root + "-typo")


def test_a_list_or_tuple_of_another_length_is_replaced_as_a_scalar_is(root):
    saved = {"t": (1, 2), "hist": [0.5, 0.25, 0.125],
             "nested": {"seen": [[1, 2], ("a", b"b", None)]}}
    ct.save(saved, root, 1)
    for mine in ({"t": (), "hist": [], "nested": {"seen": []}},
                 {"t": (0,), "hist": [0.0], "nested": {"seen": [[0], ()]}},
                 {"t": (0, 0, 0), "hist": [0.0] * 5,
                  "nested": {"seen": [[0, 0, 0], ("", b"", None, 4)]}}):
        ct.load(mine, root)
        assert mine == saved
        assert type(mine["t"]) is tuple and type(mine["hist"]) is list
    # strict=True takes the state as saved: another length is refused.
    state = {"t": (), "hist": [0.5, 0.25, 0.125],
             "nested": {"seen": [[1, 2], ("a", b"b", None)]}}
    with pytest.raises(ckpt.InvalidArgument, match="entry t is a tuple of 2"):
        ct.load(state, root, strict=True)
    assert state["t"] == ()


def test_tensors_in_a_list_of_another_length_refuse_and_change_nothing(root):
    ct.save({"n": 3, "params": [torch.ones(2), torch.full((3,), 2.0)],
             "pair": (torch.ones(1), 1)}, root, 1)
    first = torch.zeros(2)
    for name, state in (
            ("params", {"n": 0, "params": [first],
                        "pair": (torch.ones(1), 1)}),
            ("params", {"n": 0, "params": [], "pair": (torch.ones(1), 1)}),
            ("pair", {"n": 0, "params": [first, torch.zeros(3)],
                      "pair": (torch.zeros(1), 1, 2)})):
        params, pair = state["params"], state["pair"]
        with pytest.raises(ckpt.InvalidArgument) as e:
            ct.load(state, root)
        message = str(e.value)
        assert message.startswith(
            f"load step 1 from {root}: entry {name} is a")
        assert "nothing was changed" in message
        # All or nothing: not even the scalar beside it was loaded.
        assert state["n"] == 0 and state["params"] is params
        assert state["pair"] is pair and len(params) in (0, 1, 2)
        assert torch.equal(first, torch.zeros(2))
        assert all(not p.any() for p in params[1:])


def test_a_manager_passed_in_is_used_with_its_options(root):
    mgr = ckpt.open(root, keep_last=2)
    for step in range(1, 5):
        ct.save({"x": torch.tensor([step])}, mgr, step)
    assert [i.step for i in mgr.list()] == [3, 4]
    assert ct.manager(mgr) is mgr
    assert ct.manager(root) is ct.manager(root)


def test_dtensor_double_on_one_rank(root):
    whole = torch.arange(35, dtype=torch.float32).reshape(5, 7)
    mesh = sd.DeviceMesh([1], 0)
    dt = sd.distribute(whole, mesh, [sd.Shard(1)])
    ct.save({"w": dt}, root, 1)
    assert ckpt.open(root).describe().entries[0].shape == [5, 7]
    target = sd.distribute(torch.zeros(5, 7), mesh, [sd.Replicate()])
    ct.load({"w": target}, root)
    assert same_bits(target.to_local(), whole)


def test_a_partial_dtensor_is_refused():
    mesh = sd.DeviceMesh([1], 0)
    dt = sd.DTensor(torch.zeros(2), [2], mesh, [sd.Partial()])
    with pytest.raises(ckpt.InvalidArgument, match="Partial"):
        ct.save({"w": dt}, "mem://partial", 1)


def boxes(global_shape, mesh_shape, placements):
    """Every rank's (offsets, lengths) as ckpt.torch computes them."""
    from ckpt._torch_shards import _local_box
    out = []
    for rank in range(sd.DeviceMesh(mesh_shape, 0).size()):
        mesh = sd.DeviceMesh(mesh_shape, rank)
        lengths, offsets = _local_box(list(global_shape), mesh, placements,
                                      ("w",))
        out.append((offsets, lengths))
    return out


@pytest.mark.parametrize("mesh_shape,placements", [
    ([4], [sd.Shard(0)]),
    ([3], [sd.Shard(1)]),
    ([2, 3], [sd.Shard(0), sd.Shard(1)]),
    ([2, 2], [sd.Shard(0), sd.Shard(0)]),
    ([2, 3], [sd.Replicate(), sd.Shard(-1)]),
    ([4, 2], [sd.Shard(1), sd.Shard(0)]),
], ids=str)
def test_dtensor_boxes_are_where_torch_chunk_cuts(mesh_shape, placements):
    whole = torch.arange(5 * 7, dtype=torch.int32).reshape(5, 7)
    for rank, (offsets, lengths) in enumerate(
            boxes(whole.shape, mesh_shape, placements)):
        local = sd.distribute(whole, sd.DeviceMesh(mesh_shape, rank),
                              placements).to_local()
        assert list(local.shape) == lengths, rank
        if local.numel():
            box = whole[offsets[0]:offsets[0] + lengths[0],
                        offsets[1]:offsets[1] + lengths[1]]
            assert torch.equal(box, local), rank


def test_sharded_tensor_double_and_a_rank_holding_none(root):
    whole = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    # 3 rows over 4 ranks: rank 3 holds no row; one process plays rank 0.
    assert sd.chunk_rows(whole, 3, 4).local_shards() == []
    st = sd.chunk_rows(whole, 0, 1)
    ct.save({"emb": st}, root, 1)
    target = sd.chunk_rows(torch.zeros(3, 4, dtype=torch.int64), 0, 1)
    ct.load({"emb": target}, root)
    assert torch.equal(target.local_shards()[0].tensor, whole)
    empty = {"emb": sd.chunk_rows(torch.zeros(3, 4, dtype=torch.int64), 3, 4)}
    ct.load(empty, root)  # nothing to fill, nothing refused


def test_two_local_shards_of_one_sharded_tensor_are_refused():
    whole = torch.zeros(4, 2)
    a, b = sd.chunk_rows(whole, 0, 2), sd.chunk_rows(whole, 1, 2)
    both = sd.ShardedTensor(a.local_shards() + b.local_shards(), whole.shape)
    with pytest.raises(ckpt.InvalidArgument, match="2 shards"):
        ct.save({"emb": both}, "mem://two-shards", 1)


def test_dtensor_support_is_reported():
    has = hasattr(torch.distributed, "tensor") or hasattr(
        torch.distributed, "_tensor")
    assert ct.HAS_DTENSOR == has


def test_close_gives_the_lease_back_at_once(tmp_path):
    root = str(tmp_path / "run")
    assert ct.latest(root, create=True) is None
    ct.save({"x": torch.ones(3)}, root, 1)
    kept = ct.manager(root)  # still referenced: no collection frees it
    pending = ct.async_save({"x": torch.full((3,), 2.0)}, root, 2)
    ct.close(root)
    assert kept.closed and pending.done()  # the save in flight ended first
    other = ckpt.open(root)  # the lease is free now, not at collection
    other.save(3, {"x": torch.zeros(3).numpy()})
    other.close()
    # The next call opens a manager of its own again.
    state = {"x": torch.empty(3)}
    assert ct.load(state, root).step == 3
    assert same_bits(state["x"], torch.zeros(3))
    with pytest.raises(ckpt.FailedPrecondition, match="is closed"):
        kept.latest()


def test_one_root_spelled_two_ways_is_one_manager(tmp_path, monkeypatch):
    # A second manager would wait for the first one's lease (70 s by
    # default) and fail naming this very process as "another party".
    monkeypatch.chdir(tmp_path)
    ct.save({"x": torch.ones(3)}, "run", 1)
    mgr = ct.manager("run")
    for spelling in ("./run", f"{tmp_path}/run/", f"file://{tmp_path}/run"):
        assert ct.manager(spelling) is mgr, spelling
    ct.save({"x": torch.zeros(3)}, f"{tmp_path}/run", 2)
    ct.close(f"{tmp_path}//run")
    assert mgr.closed


def test_save_and_dcp_save_through_the_writer_share_one_manager(tmp_path):
    # Each kept a manager of its own: the second waited for the first's
    # lease (70 s by default) and failed naming this very process.
    import torch.distributed.checkpoint as dcp
    root = str(tmp_path / "run")
    ct.save({"x": torch.ones(3)}, root, 1)
    dcp.save({"x": torch.full((3,), 2.0)},
             storage_writer=ct.StorageWriter(root), checkpoint_id=2)
    ct.save({"x": torch.full((3,), 3.0)}, root, 3)
    state = {"x": torch.empty(3)}
    dcp.load(state, storage_reader=ct.StorageReader(root), checkpoint_id=2)
    assert same_bits(state["x"], torch.full((3,), 2.0))
    assert ct.load(state, root).step == 3
    assert same_bits(state["x"], torch.full((3,), 3.0))
    ct.close(root)
    assert ct.manager(root) is not None and not ct.manager(root).closed
