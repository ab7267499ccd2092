"""A load either completes at one step or changes nothing; a resume skips
damaged steps, and a save of a damaged step's number replaces it; an
asynchronous save's error is reported once; the errors
of metrics and as_torch name what is wrong."""

import copy
import glob
import os
import sys
import warnings

import numpy as np
import pytest

import ckpt

torch = pytest.importorskip("torch")
import ckpt.torch as ct  # noqa: E402 - after the skip


def flip_a_byte(root, step):
    """Damages one byte of step `step`'s data."""
    files = [f for d in glob.glob(os.path.join(root, "step-*"))
             if int(os.path.basename(d).split("-")[1].split(".")[0]) == step
             for f in glob.glob(os.path.join(d, "*.safetensors"))]
    assert files, f"no data file of step {step} under {root}"
    with open(files[0], "r+b") as f:
        f.seek(-1, os.SEEK_END)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_END)
        f.write(bytes([byte ^ 0x40]))


def trained(seed, sizes=(4, 3)):
    """A model and an Adam optimizer with moments, after one step."""
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(2, sizes[0])).sum().backward()
    opt.step()
    return model, opt


def fresh(seed, sizes=(4, 3)):
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])]
    model = torch.nn.Sequential(*layers)
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def snapshot(state):
    """Everything a failed load must leave as it was, copied."""
    model, opt = state["model"], state["optim"]
    return {"params": {k: v.clone() for k, v in model.state_dict().items()},
            "optim": copy.deepcopy(opt.state_dict()),
            "plain": state["plain"].clone(),
            "step": state["step"], "extra": dict(state["extra"])}


def assert_unchanged(state, before):
    now = state["model"].state_dict()
    assert set(now) == set(before["params"])
    for k, v in before["params"].items():
        assert torch.equal(now[k], v), k
    assert_same_optim(state["optim"].state_dict(), before["optim"])
    assert torch.equal(state["plain"], before["plain"])
    assert state["step"] == before["step"]
    assert state["extra"] == before["extra"]


def assert_same_optim(a, b):
    assert a["param_groups"] == b["param_groups"]
    assert a["state"].keys() == b["state"].keys()
    for i in a["state"]:
        assert a["state"][i].keys() == b["state"][i].keys()
        for k in a["state"][i]:
            x, y = a["state"][i][k], b["state"][i][k]
            assert torch.equal(x, y) if torch.is_tensor(x) else x == y


def saved_state(seed):
    model, opt = trained(seed)
    return {"model": model, "optim": opt, "plain": torch.full((3,), seed * 1.),
            "step": seed, "extra": {"name": f"run-{seed}"}}


def new_state():
    model, opt = fresh(99)
    return {"model": model, "optim": opt, "plain": torch.zeros(3),
            "step": 0, "extra": {"name": "fresh"}}


@pytest.fixture(autouse=True)
def _close_managers():
    yield
    ct.close()


def test_a_damaged_step_changes_nothing(root):
    ct.save(saved_state(1), root, 1)
    flip_a_byte(root, 1)
    state = new_state()
    before = snapshot(state)
    assert not state["optim"].state  # a fresh Adam: no moments
    with pytest.raises(ckpt.DataLoss):
        ct.load(state, root, 1)
    assert_unchanged(state, before)
    assert not state["optim"].state


def test_a_smaller_model_changes_nothing_and_says_why(root):
    model, opt = trained(1, sizes=(4, 3, 2))
    ct.save({"model": model, "optim": opt, "plain": torch.ones(3),
             "step": 1, "extra": {"name": "big"}}, root, 1)
    state = new_state()
    before = snapshot(state)
    with pytest.raises(ckpt.InvalidArgument, match="model.1.bias"):
        ct.load(state, root, 1)
    assert_unchanged(state, before)


class Refuses:
    """A Stateful object whose load_state_dict() raises."""

    def __init__(self):
        self.value = torch.zeros(2)

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, state):
        raise RuntimeError("this object refuses its state")


def test_a_raising_load_state_dict_is_undone(root):
    saved = saved_state(1)
    saved["zlast"] = Refuses()
    ct.save(saved, root, 1)
    state = new_state()
    state["zlast"] = Refuses()
    before = snapshot(state)
    with pytest.raises(RuntimeError, match="refuses"):
        ct.load(state, root, 1)
    assert_unchanged(state, before)
    assert not state["optim"].state
    assert torch.equal(state["zlast"].value, torch.zeros(2))


def test_an_inference_tensor_is_named_before_anything_is_read(root):
    # Handing the bytes over to an inference tensor outside inference mode
    # raised torch's RuntimeError after the tensors before it had been
    # written: the load was half done.
    saved = saved_state(1)
    saved["zlast"] = torch.ones(2)
    ct.save(saved, root, 1)
    state = new_state()
    with torch.inference_mode():
        state["zlast"] = torch.zeros(2)
    before = snapshot(state)
    with pytest.raises(ckpt.InvalidArgument,
                       match=f"load step 1 from {root}: entry 'zlast': an "
                             f"inference tensor .*torch.inference_mode"):
        ct.load(state, root, 1)
    assert_unchanged(state, before)
    assert not state["optim"].state
    with torch.inference_mode():  # where torch lets it be written
        ct.load({"zlast": state["zlast"]}, root, 1)
    assert torch.equal(state["zlast"], torch.ones(2))


class Unwritable(torch.Tensor):
    """A tensor whose in-place copies raise, as torch raises for tensors it
    lets nothing write."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.copy_ and isinstance(args[0], Unwritable):
            raise RuntimeError("this tensor refuses writes")
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_hand_over_that_raises_puts_back_what_it_exchanged(root):
    saved = saved_state(1)
    saved["zlast"] = torch.ones(2)
    ct.save(saved, root, 1)
    state = new_state()
    state["zlast"] = torch.zeros(2).as_subclass(Unwritable)
    before = snapshot(state)
    with pytest.raises(RuntimeError, match="refuses writes"):
        ct.load(state, root, 1)
    assert_unchanged(state, before)
    assert not state["optim"].state


def test_a_whole_load_loads_everything(root):
    saved = saved_state(1)
    ct.save(saved, root, 1)
    state = new_state()
    info = ct.load(state, root, 1)
    assert info.step == 1
    for k, v in saved["model"].state_dict().items():
        assert torch.equal(state["model"].state_dict()[k], v)
    assert_same_optim(state["optim"].state_dict(), saved["optim"].state_dict())
    assert torch.equal(state["plain"], saved["plain"])
    assert state["step"] == 1 and state["extra"] == {"name": "run-1"}


def test_transactional_false_names_what_it_may_have_written(root):
    ct.save(saved_state(1), root, 1)
    flip_a_byte(root, 1)
    state = new_state()
    with pytest.raises(ckpt.DataLoss, match="transactional=False") as e:
        ct.load(state, root, 1, transactional=False)
    assert "'model.0.weight'" in str(e.value)
    assert state["step"] == 0  # scalars are replaced only after


def test_load_into_changes_nothing_on_damage(mgr, root):
    mgr.save(1, {"w": np.arange(6.0).reshape(2, 3), "n": 5, "s": "saved",
                 "b": np.arange(4, dtype=np.int32)})
    flip_a_byte(root, 1)
    w = np.full((2, 3), -1.0)
    b = np.zeros(4, dtype=np.int32)
    state = {"w": w, "n": 0, "s": "mine", "b": b}
    with pytest.raises(ckpt.DataLoss):
        mgr.load_into(state, 1)
    assert state["n"] == 0 and state["s"] == "mine"
    assert state["w"] is w and (w == -1.0).all()
    assert state["b"] is b and (b == 0).all()


def test_load_into_changes_nothing_on_a_late_mismatch(mgr):
    mgr.save(1, {"a": np.ones(3), "z": np.ones(5), "n": 1})
    a = np.zeros(3)
    state = {"a": a, "z": np.zeros(4), "n": 0}  # z's shape differs
    with pytest.raises(ckpt.InvalidArgument, match="z"):
        mgr.load_into(state, 1)
    assert (a == 0).all() and state["n"] == 0


def test_load_into_fills_in_place(mgr):
    mgr.save(1, {"w": np.arange(6.0).reshape(2, 3), "n": 5})
    w = np.zeros((3, 2)).T  # not contiguous
    state = {"w": w, "n": 0}
    assert mgr.load_into(state, 1).step == 1
    assert state["w"] is w and (w == np.arange(6.0).reshape(2, 3)).all()
    assert state["n"] == 5


def save_steps(mgr_or_root, steps):
    for s in steps:
        if isinstance(mgr_or_root, str):
            ct.save({"w": torch.full((8,), float(s)), "step": s},
                    mgr_or_root, s)
        else:
            mgr_or_root.save(s, {"w": np.full(8, float(s)), "step": s})


def test_resume_skips_a_damaged_newest_step(root):
    save_steps(root, [1, 2, 3])
    flip_a_byte(root, 3)
    state = {"w": torch.zeros(8), "step": 0}
    with pytest.warns(RuntimeWarning, match="skipped step 3"):
        info = ct.load(state, root)
    assert info.step == 2
    assert torch.equal(state["w"], torch.full((8,), 2.0))
    assert state["step"] == 2
    # An explicit step never falls back.
    with pytest.raises(ckpt.DataLoss):
        ct.load(state, root, 3)
    assert state["step"] == 2


def test_resume_fails_naming_every_step_when_none_loads(root):
    save_steps(root, [1, 2])
    flip_a_byte(root, 1)
    flip_a_byte(root, 2)
    state = {"w": torch.zeros(8), "step": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ckpt.DataLoss, match="step 2: .*step 1: "):
            ct.load(state, root)
    assert state["step"] == 0 and torch.equal(state["w"], torch.zeros(8))


def test_a_mismatch_does_not_fall_back(root):
    save_steps(root, [1, 2])
    state = {"w": torch.zeros(9), "step": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ckpt.InvalidArgument, match="step 2"):
            ct.load(state, root)


def test_manager_resume_skips_a_damaged_newest_step(mgr, root):
    save_steps(mgr, [1, 2, 3])
    flip_a_byte(root, 3)
    with pytest.warns(RuntimeWarning, match="skipped step 3"):
        assert mgr.load()["step"] == 2
    state = {"w": np.zeros(8), "step": 0}
    with pytest.warns(RuntimeWarning, match="skipped step 3"):
        assert mgr.load_into(state).step == 2
    assert state["step"] == 2 and (state["w"] == 2.0).all()
    with pytest.raises(ckpt.DataLoss):
        mgr.load(3)


def test_a_step_deleted_while_a_resume_loads_it_sends_it_to_the_newest(root):
    # A job saving beside the reader (keep_last=1) commits the next step
    # and deletes this one just as the reader's resume starts to load it:
    # no damage, and not the end of the resume, which lists again.
    saver = ckpt.open(root, create=True, keep_last=1)
    save_steps(saver, [3])
    reader = ckpt.open(root)
    library = reader._m

    def saving_beside(name):
        real = getattr(library, name)
        moved_on = []

        def call(step, *args):
            if not moved_on:
                moved_on.append(step)
                save_steps(saver, [step + 1])
                assert [i.step for i in saver.list()] == [step + 1]
            return real(step, *args)
        setattr(library, name, call)

    saving_beside("load")
    saving_beside("load_into")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no step is skipped as damaged
        assert reader.load()["step"] == 4
        state = {"w": np.zeros(8), "step": 0}
        assert reader.load_into(state).step == 5
        assert state["step"] == 5 and (state["w"] == 5.0).all()
        # ckpt.torch's resume, through the same manager.
        saving_beside("load_into")
        tensors = {"w": torch.zeros(8, dtype=torch.float64), "step": 0}
        assert ct.load(tensors, reader).step == 6
        assert tensors["step"] == 6 and (tensors["w"] == 6.0).all()
    saver.close()


def test_saving_a_damaged_step_again_replaces_it(mgr, root):
    save_steps(mgr, [1, 2, 3])
    flip_a_byte(root, 3)
    with pytest.warns(RuntimeWarning, match="skipped step 3"):
        assert mgr.load()["step"] == 2
    result = mgr.save(3, {"w": np.full(8, 33.0), "step": 3})
    assert result.replaced and "checksum" in result.replaced_because
    assert (mgr.load(3)["w"] == 33.0).all()
    # Whole now: saved again, it is AlreadyExists as ever.
    with pytest.raises(ckpt.AlreadyExists):
        mgr.save(3, {"w": np.zeros(8), "step": 3})
    assert not mgr.save(4, {"w": np.zeros(8), "step": 4}).replaced


def test_ckpt_torch_saves_over_a_damaged_step(root):
    save_steps(root, [1, 2])
    flip_a_byte(root, 2)
    state = {"w": torch.zeros(8), "step": 0}
    with pytest.warns(RuntimeWarning, match="skipped step 2"):
        assert ct.load(state, root).step == 1
    assert ct.save({"w": torch.full((8,), 22.0), "step": 2}, root, 2).replaced
    assert ct.load(state, root).step == 2
    assert torch.equal(state["w"], torch.full((8,), 22.0))


def test_a_collected_async_error_is_not_raised_again(mgr):
    mgr.save(1, {"x": np.zeros(2)})
    h = mgr.save_async(1, {"x": np.ones(2)})
    with pytest.raises(ckpt.AlreadyExists):
        h.wait()
    mgr.save(2, {"x": np.ones(2)})  # not the same error again
    assert [i.step for i in mgr.list()] == [1, 2]


def test_an_uncollected_async_error_is_raised_once_by_the_next_save(mgr):
    mgr.save(1, {"x": np.zeros(2)})
    h = mgr.save_async(1, {"x": np.ones(2)})
    with pytest.raises(ckpt.AlreadyExists,
                       match="step 1.*step 2 was not saved"):
        mgr.save(2, {"x": np.ones(2)})
    assert [i.step for i in mgr.list()] == [1]
    mgr.save(2, {"x": np.ones(2)})
    assert [i.step for i in mgr.list()] == [1, 2]
    with pytest.raises(ckpt.AlreadyExists):
        h.wait()


def test_torch_async_save_error_is_raised_once(root):
    ct.save({"x": torch.zeros(2)}, root, 1)
    h = ct.async_save({"x": torch.ones(2)}, root, 1)
    with pytest.raises(ckpt.AlreadyExists):
        h.wait()
    ct.save({"x": torch.ones(2)}, root, 2)
    assert ct.latest(root) == 2


def test_metrics_take_numbers_of_numpy_and_torch(mgr):
    mgr.save(1, {"x": np.zeros(1)},
             metrics={"loss": torch.tensor(0.5), "acc": np.float32(0.25),
                      "n": np.int64(3), "plain": 1})
    assert mgr.list()[0].metrics == {"loss": 0.5, "acc": 0.25, "n": 3.0,
                                     "plain": 1.0}


def test_a_bad_metric_is_named_with_its_type(mgr):
    with pytest.raises(ckpt.InvalidArgument,
                       match=r"metrics\['loss'\] is a torch.Tensor of shape "
                             r"\[2\]"):
        mgr.save(1, {"x": np.zeros(1)}, metrics={"loss": torch.ones(2)})
    with pytest.raises(ckpt.InvalidArgument, match=r"metrics\['name'\].*str"):
        mgr.save(1, {"x": np.zeros(1)}, metrics={"name": "x"})
    assert mgr.latest() is None


def test_as_torch_without_torch_is_an_error(mgr, monkeypatch):
    mgr.save(1, {"x": np.zeros(2)})
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch fails
    with pytest.raises(ckpt.Unavailable, match="as_torch.*not importable"):
        mgr.load(1, as_torch=True)
    assert isinstance(mgr.load(1)["x"], np.ndarray)


def test_numpy_scalars_are_replaced_as_python_scalars_are(root):
    # np.float32 and np.int64 save as 0-d tensors; a load replaces them in
    # their containers (they cannot be filled in place), with their type,
    # and a failed load leaves them as they were.
    saved = {"w": torch.ones(2), "best": np.float32(0.25), "seen": np.int64(7),
             "ok": np.bool_(True), "hist": [np.float64(1.5)]}
    ct.save(saved, root, 1)
    mgr = ckpt.open(root)
    for load in (lambda s: ct.load(s, root, 1),
                 lambda s: mgr.load_into(s, 1),
                 lambda s: mgr.load_into(s, 1, transactional=False)):
        state = {"w": torch.zeros(2), "best": np.float32(0),
                 "seen": np.int64(0), "ok": np.bool_(False),
                 "hist": [np.float64(0)]}
        load(state)
        assert state["best"] == np.float32(0.25)
        assert type(state["best"]) is np.float32
        assert state["seen"] == 7 and type(state["seen"]) is np.int64
        assert state["ok"] is np.True_
        assert state["hist"][0] == 1.5 and type(state["hist"][0]) is np.float64
    flip_a_byte(root, 1)
    state = {"w": torch.zeros(2), "best": np.float32(0), "seen": np.int64(0),
             "ok": np.bool_(False), "hist": [np.float64(0)]}
    with pytest.raises(ckpt.DataLoss):
        ct.load(state, root, 1)
    assert state["best"] == 0 and state["seen"] == 0 and not state["ok"]
    assert state["hist"] == [0]
