"""ckpt.jax driven by code written for Orbax's CheckpointManager: its
calls (should_save, save and restore with args=), its loop's steps beside
Orbax itself, and its option names.

Run with python/tests_jax (ctest's jax_test); run by hand, the module
sets the flag for 8 CPU devices itself before JAX starts.
"""

import os

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " +
                               _FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402 - after the flags it reads once
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import ckpt.jax as cj  # noqa: E402


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "root")


def test_should_save_as_orbax_has_it(root):
    """Orbax's `if mngr.should_save(step): mngr.save(step, ...)` was an
    AttributeError."""
    with cj.CheckpointManager(root, save_interval_steps=3,
                              async_save=False) as mgr:
        # A root with no step yet: any step is due (Orbax's first save).
        assert mgr.should_save(1) and mgr.should_save(0)
        assert mgr.save(0, {"w": 0}) is True
        due = [s for s in range(10) if mgr.should_save(s)]
        assert due == [3, 6, 9]
        for step in due[:2]:
            assert mgr.save(step, {"w": step}) is True
        assert not mgr.should_save(6)       # saved already
        assert not mgr.should_save(3)       # older than the newest
        assert mgr.should_save(np.int64(9)) and mgr.should_save(jnp.int32(9))
        with pytest.raises(TypeError, match="should_save.*float"):
            mgr.should_save(9.0)


def test_orbax_spelled_loop_keeps_the_steps_orbax_keeps(root, tmp_path):
    """A loop in Orbax's spelling (save(step, args=StandardSave(state))
    every step with save_interval_steps, restore(step,
    args=StandardRestore(abstract))) run on Orbax itself and on ckpt.jax:
    the same steps saved (Orbax saves a root's first step whatever the
    interval; ckpt.jax put it off) and the same state restored. args= was
    an unexpected keyword argument."""
    import orbax.checkpoint as ocp

    def state_at(step):
        return {"w": jnp.full((4, 3), step, jnp.float32),
                "step": jnp.asarray(step, jnp.int32)}

    orbax = ocp.CheckpointManager(
        str(tmp_path / "orbax"), options=ocp.CheckpointManagerOptions(
            save_interval_steps=5, enable_async_checkpointing=False))
    ours = cj.CheckpointManager(root, save_interval_steps=5)
    saved = {}
    for name, mgr in (("orbax", orbax), ("ckpt", ours)):
        saved[name] = [step for step in range(1, 13)
                       if mgr.save(step, args=ocp.args.StandardSave(
                           state_at(step)))]
        mgr.wait_until_finished()
    assert saved["ckpt"] == saved["orbax"] == [1, 5, 10]
    assert ours.all_steps() == list(orbax.all_steps()) == [1, 5, 10]
    abstract = jax.eval_shape(lambda: state_at(0))
    got = {name: mgr.restore(mgr.latest_step(),
                             args=ocp.args.StandardRestore(abstract))
           for name, mgr in (("orbax", orbax), ("ckpt", ours))}
    for key in ("w", "step"):
        assert np.array_equal(np.asarray(got["ckpt"][key]),
                              np.asarray(got["orbax"][key]))
    assert int(got["ckpt"]["step"]) == 10
    # Several items at once, or args of another kind, are named.
    with pytest.raises(TypeError, match="Composite of \\['opt', 'state'\\]"):
        ours.save(15, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state_at(15)),
            opt=ocp.args.StandardSave(state_at(15))))
    with pytest.raises(TypeError, match="not both"):
        ours.save(15, state_at(15), args=ocp.args.StandardSave({}))
    with pytest.raises(TypeError, match=f"save\\(8.0\\) of {root}"):
        ours.save(8.0, state_at(8))
    assert ours.all_steps() == [1, 5, 10]
    ours.close()
    orbax.close()


def test_orbax_options_name_what_ckpt_jax_takes(root):
    """Orbax's max_to_keep=, options=CheckpointManagerOptions(...) and
    best_fn= were a bare "unexpected keyword argument"."""
    for name, hint in (("max_to_keep", "keep_last=N"),
                       ("options", "its options as keywords: keep_last="),
                       ("best_fn", "keep_best=N with best_metric=")):
        with pytest.raises(TypeError, match=f"{name}= is Orbax's; ckpt.jax "
                           f"takes {hint}"):
            cj.CheckpointManager(root, **{name: 3})
    with pytest.raises(TypeError, match="did you mean 'keep_last'"):
        cj.CheckpointManager(root, keep_lst=3)


def test_best_step_metrics_delete_and_reload_as_orbax_has_them(root,
                                                               tmp_path):
    """Orbax's best_step(), metrics(step), delete(step) and reload() were
    AttributeErrors: a loop that keeps the best steps by a metric and
    restores the best one, run on Orbax itself and on ckpt.jax."""
    import orbax.checkpoint as ocp

    orbax = ocp.CheckpointManager(
        str(tmp_path / "orbax"), options=ocp.CheckpointManagerOptions(
            max_to_keep=2, best_fn=lambda m: m["loss"], best_mode="min",
            enable_async_checkpointing=False))
    ours = cj.CheckpointManager(root, keep_best=2, best_metric="loss")
    for mgr in (orbax, ours):
        assert mgr.best_step() is None
        for step, loss in ((1, 0.5), (2, 0.1), (3, 0.9), (4, 0.3), (5, 0.1)):
            mgr.save(step, args=ocp.args.StandardSave(
                {"w": jnp.full(2, step)}), metrics={"loss": loss})
        mgr.wait_until_finished()
    for mgr in (orbax, ours):
        assert list(mgr.all_steps()) == [2, 5]
        assert mgr.best_step() == 5  # the newer of two equal losses
        assert mgr.metrics(2) == {"loss": 0.1}
        assert int(mgr.restore(mgr.best_step())["w"][0]) == 5
        mgr.delete(5)
        mgr.reload()
        assert list(mgr.all_steps()) == [2] and mgr.best_step() == 2
    with pytest.raises(TypeError, match="delete\\(2.0\\)"):
        ours.delete(2.0)
    ours.close()
    orbax.close()
    # Without a metric, the newest step, as Orbax without best_fn.
    with cj.CheckpointManager(str(tmp_path / "plain"),
                              async_save=False) as mgr:
        mgr.save(3, {"w": 1})
        mgr.save(7, {"w": 2})
        assert mgr.best_step() == 7 and mgr.metrics(7) is None
