"""CheckpointManager.close(), with blocks and wait(): the root's lease is
given back at close, not when the object is collected; no save is lost by
closing; a closed manager says so."""

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import ckpt


def state(value, n=1000):
    return {"w": np.full(n, value, dtype=np.float32), "step": int(value)}


def test_close_gives_the_lease_back_at_once(root):
    first = ckpt.open(root, create=True)
    first.save(1, state(1))
    second = ckpt.open(root, lease_wait_seconds=0)
    with pytest.warns(RuntimeWarning, match="close\\(\\) it first"), \
            pytest.raises(ckpt.FailedPrecondition, match="another party"):
        second.save(2, state(2))  # the lease is the first manager's
    first.close()
    # `first` is still referenced: the lease went with close(), not with
    # the object.
    assert first.closed
    assert second.save(2, state(2)).info.step == 2
    assert [i.step for i in second.list()] == [1, 2]


def test_another_process_writes_right_after_close(root):
    mgr = ckpt.open(root, create=True)
    mgr.save(1, state(1))
    other = textwrap.dedent(f"""
        import numpy as np, ckpt
        m = ckpt.open({root!r}, lease_wait_seconds=0)
        m.save(2, {{"w": np.zeros(3)}})
        print(m.latest())
    """)

    def run():
        return subprocess.run([sys.executable, "-c", other],
                              capture_output=True, text=True, timeout=60,
                              env=dict(os.environ))

    refused = run()
    assert refused.returncode != 0 and "FailedPrecondition" in refused.stderr
    mgr.close()
    done = run()
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2"]
    assert mgr.closed  # alive, closed, and no longer the writer


def test_a_with_block_closes(root):
    with ckpt.open(root, create=True) as mgr:
        assert not mgr.closed
        mgr.save(1, state(1))
    assert mgr.closed
    with ckpt.open(root, lease_wait_seconds=0) as again:
        again.save(2, state(2))
        assert again.latest() == 2


def test_every_call_of_a_closed_manager_says_it_is_closed(root):
    mgr = ckpt.open(root, create=True)
    mgr.save(1, state(1))
    mgr.close()
    mgr.close()  # again: nothing
    closed = f"the manager of {mgr.url} is closed"
    calls = {
        "save": lambda: mgr.save(2, state(2)),
        "save_async": lambda: mgr.save_async(2, state(2)),
        "load": lambda: mgr.load(),
        "load_into": lambda: mgr.load_into(state(0)),
        "load_rank_local": lambda: mgr.load_rank_local("w"),
        "latest": mgr.latest,
        "list": mgr.list,
        "describe": mgr.describe,
        "delete": lambda: mgr.delete(1),
        "tiers": lambda: mgr.tiers(root + "-local"),
        "wait": mgr.wait,
    }
    for name, call in calls.items():
        with pytest.raises(ckpt.FailedPrecondition) as e:
            call()
        assert closed in str(e.value), name
    # What it was stays readable.
    assert mgr.url.endswith("root") and mgr.rank == 0 and mgr.world_size == 1
    assert "closed" in repr(mgr)
    assert ckpt.open(root).latest() == 1  # nothing changed


def test_wait_waits_for_every_async_save(mgr):
    handles = [mgr.save_async(s, state(s, 1 << 16)) for s in (1, 2, 3)]
    assert mgr.wait() is None
    assert all(h.done() for h in handles)
    assert [i.step for i in mgr.list()] == [1, 2, 3]
    mgr.wait()  # nothing pending: returns at once


def test_wait_raises_the_first_failure(mgr):
    mgr.save(1, state(1))
    mgr.save_async(1, state(1))  # committed already: fails
    with pytest.raises(ckpt.AlreadyExists):
        mgr.wait()
    mgr.wait()  # raised once; nothing pending any more
    mgr.save_async(2, state(2))
    mgr.wait()
    assert mgr.latest() == 2


def test_wait_raises_no_failure_already_raised(mgr):
    # By its handle's wait().
    mgr.save(1, state(1))
    handle = mgr.save_async(1, state(1))  # committed already: fails
    with pytest.raises(ckpt.AlreadyExists):
        handle.wait()
    mgr.wait()
    # By the next save, which carried it (and saved nothing); the job
    # saves again, and its end-of-epoch wait() has nothing to raise.
    mgr.save_async(1, state(1))
    with pytest.raises(ckpt.Error, match="step 2 was not saved"):
        mgr.save(2, state(2))
    mgr.save_async(2, state(2)).wait()
    mgr.wait()
    assert mgr.latest() == 2


def test_a_job_that_never_waits_loses_no_step_unseen(mgr):
    # Step 2 fails in the background (committed already); steps 3 and 4
    # are started without anyone waiting: they save nothing, and wait()
    # says so, naming both, rather than let step 4 commit as if nothing
    # had been lost.
    for step in (0, 1, 2):
        mgr.save(step, state(step))
    for step in (2, 3, 4):
        mgr.save_async(step, state(step))
    with pytest.raises(ckpt.AlreadyExists,
                       match=r"step 2.*steps 3 and 4 were not saved"):
        mgr.wait()
    assert [i.step for i in mgr.list()] == [0, 1, 2]
    mgr.save_async(3, state(3))
    mgr.wait()
    assert [i.step for i in mgr.list()] == [0, 1, 2, 3]


def test_close_raises_what_a_job_that_never_waits_lost(root):
    mgr = ckpt.open(root, create=True)
    mgr.save(1, state(1))
    mgr.save_async(1, state(1))
    mgr.save_async(2, state(2))
    with pytest.raises(ckpt.AlreadyExists, match="step 2 was not saved"):
        mgr.close()


def test_close_waits_for_a_pending_save_and_it_commits(root):
    mgr = ckpt.open(root, create=True)
    big = np.arange(1 << 22, dtype=np.float32)  # 16 MiB: still in flight
    handle = mgr.save_async(7, {"w": big})
    mgr.close()
    assert handle.done()
    assert handle.wait().info.step == 7
    loaded = ckpt.open(root).load()
    assert loaded["w"].shape == big.shape and (loaded["w"] == big).all()


def test_close_raises_a_failure_nobody_saw(root):
    mgr = ckpt.open(root, create=True)
    mgr.save(1, state(1))
    mgr.save_async(1, state(1))
    with pytest.raises(ckpt.AlreadyExists):
        mgr.close()
    assert mgr.closed
    mgr.close()  # raised once

    # One that its handle's wait() raised is not raised again.
    mgr = ckpt.open(root)
    handle = mgr.save_async(1, state(1))
    with pytest.raises(ckpt.AlreadyExists):
        handle.wait()
    mgr.close()


def test_a_manager_dropped_unclosed_warns_of_a_failure_nobody_saw(root):
    import gc
    mgr = ckpt.open(root, create=True)
    mgr.save(1, state(1))
    mgr.save_async(1, state(1))  # fails: step 1 is committed
    with pytest.warns(RuntimeWarning, match=r"never closed.*step 1"):
        del mgr
        gc.collect()
    # One whose failure was seen, or that committed, says nothing.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mgr = ckpt.open(root)
        mgr.save_async(2, state(2)).wait()
        del mgr
        gc.collect()
        mgr = ckpt.open(root)
        with pytest.raises(ckpt.AlreadyExists):
            mgr.save_async(2, state(2)).wait()
        del mgr
        gc.collect()
    # Closed, it says nothing more either.
    mgr = ckpt.open(root)
    mgr.save_async(2, state(2))
    with pytest.raises(ckpt.AlreadyExists):
        mgr.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        del mgr
        gc.collect()


def test_a_with_block_that_raises_keeps_its_error(root):
    with pytest.raises(KeyError, match="the block's"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with ckpt.open(root, create=True) as mgr:
                mgr.save(1, state(1))
                mgr.save_async(1, state(1))  # fails, unseen
                raise KeyError("the block's")
    assert mgr.closed
    # The failed save is not lost: a warning names it.
    messages = [str(w.message) for w in caught]
    assert any(m.startswith(f"closing the manager of {mgr.url} after an "
                            f"error: ") and "step 1" in m
               for m in messages), messages


def test_close_closes_the_tiers_it_made(root, tmp_path):
    mgr = ckpt.open(root, create=True)
    tiers = mgr.tiers(str(tmp_path / "local"), local_every=1,
                      durable_every=1, replicas=0)
    tiers.save(1, state(1))
    mgr.close()
    with pytest.raises(ckpt.FailedPrecondition):
        tiers.save(2, state(2))
    tiers.close()  # again: nothing
    assert ckpt.open(root).latest() == 1
