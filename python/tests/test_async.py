"""save_async, and the GIL being released during I/O."""

import threading
import time

import numpy as np
import pytest

import ckpt


def test_save_async_commits_on_wait(mgr):
    state = {"w": np.arange(1 << 20, dtype=np.float32), "epoch": 1}
    handle = mgr.save_async(1, state, epoch=0)
    assert handle.step == 1
    result = handle.wait()
    assert handle.done() and not result.skipped and result.info.step == 1
    assert handle.wait().info.step == 1  # waiting again gives the same result
    assert (mgr.load()["w"] == state["w"]).all()


def test_async_saves_commit_in_order(root):
    mgr = ckpt.open(root, keep_last=2)
    handles = [mgr.save_async(s, {"x": np.full(1000, s)}) for s in range(1, 6)]
    last = mgr.save(6, {"x": np.full(1000, 6)})  # waits for the pending ones
    assert all(h.done() for h in handles)
    deleted = [s for h in handles for s in h.wait().deleted_steps]
    assert deleted + last.deleted_steps == [1, 2, 3, 4]
    assert [i.step for i in mgr.list()] == [5, 6]


def test_async_error_is_raised_by_wait(mgr):
    mgr.save(1, {"x": np.zeros(1)})
    handle = mgr.save_async(1, {"x": np.zeros(1)})
    with pytest.raises(ckpt.AlreadyExists):
        handle.wait()
    with pytest.raises(ckpt.AlreadyExists):
        handle.wait()


def test_arrays_may_change_as_soon_as_save_async_returns(mgr):
    w = np.arange(1 << 20, dtype=np.float32)
    handle = mgr.save_async(1, {"w": w})
    w[:] = -1  # the save holds its own copy
    handle.wait()
    assert (mgr.load(1)["w"] == np.arange(1 << 20, dtype=np.float32)).all()


def test_async_error_is_also_raised_by_the_next_save(mgr):
    mgr.save(1, {"x": np.zeros(1)})
    mgr.save_async(1, {"x": np.zeros(1)})  # handle dropped: error unseen
    with pytest.raises(ckpt.AlreadyExists) as raised:
        mgr.save(2, {"x": np.zeros(1)})
    # In Python's words: wait(), not the C++ Wait().
    assert "no wait() (of its handle, or the manager's) collected" in \
        str(raised.value) and "Wait()" not in str(raised.value)
    mgr.wait()  # raised once, by that save: not again
    mgr.save(2, {"x": np.ones(1)})  # reported once, then saves again
    assert [i.step for i in mgr.list()] == [1, 2]


def test_dropped_handle_still_saves_and_keeps_arrays_alive(mgr):
    mgr.save_async(1, {"w": np.arange(1 << 18, dtype=np.float64)})
    # The handle and the only reference to the array are gone; the save
    # must neither read freed memory nor be lost.
    mgr.save(2, {"x": np.zeros(1)})
    assert (mgr.load(1)["w"] == np.arange(1 << 18)).all()


def longest_stall_during(action):
    """Runs `action` while a Python thread ticks; returns (the longest gap
    between ticks, the action's duration), in seconds."""
    ticks, stop = [], threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    thread = threading.Thread(target=tick)
    thread.start()
    time.sleep(0.02)
    start = time.perf_counter()
    action()
    end = time.perf_counter()
    stop.set()
    thread.join()
    during = [t for t in ticks if start <= t <= end] + [end]
    gaps = [b - a for a, b in zip([start] + during, during)]
    return max(gaps), end - start


def test_gil_is_released_during_save_and_load(mgr):
    steps = iter(range(1, 100))
    # A call must last long enough for a held GIL to show as a stall: a
    # fast disk saves 128 MiB in 30 ms, so the state grows (up to 1 GiB)
    # until a save takes 0.1 s. The second save of a size is the one timed:
    # the first also touches the array's fresh pages.
    n = 32 << 20
    while True:
        big = {"w": np.ones(n, dtype=np.float32)}
        mgr.save(next(steps), big)
        start = time.perf_counter()
        mgr.save(next(steps), big)
        if time.perf_counter() - start > 0.1 or n >= 256 << 20:
            break
        n *= 2

    def ticks_through(action):
        # With the GIL held the ticking thread stalls for the whole call,
        # every time; a busy machine may stall it now and then anyway, so
        # one clean call out of three is proof enough.
        results = [longest_stall_during(action) for _ in range(3)]
        assert any(stall < max(took / 2, 0.02) for stall, took in results), \
            results
        return results

    results = ticks_through(lambda: mgr.save(next(steps), big))
    assert all(took > 0.05 for _, took in results)
    ticks_through(lambda: mgr.load_into(big))


def test_staging_prepared_at_open_serves_save_async(root):
    # async_staging_prepare_bytes faults the staging memory in at open; the
    # saves that use it (the first one, a larger state, a smaller one) keep
    # every byte, and a bad value is refused at open, naming the option.
    w = np.arange(1 << 20, dtype=np.float32)
    mgr = ckpt.open(root, create=True, async_staging_prepare_bytes=w.nbytes)
    mgr.save_async(1, {"w": w}).wait()
    w[:] = 0
    big = np.arange(3 << 20, dtype=np.float32)
    mgr.save_async(2, {"w": big}).wait()
    mgr.save_async(3, {"w": np.ones(10, dtype=np.float32)}).wait()
    assert (mgr.load(1)["w"] == np.arange(1 << 20, dtype=np.float32)).all()
    assert (mgr.load(2)["w"] == big).all()
    assert (mgr.load(3)["w"] == 1).all()
    mgr.close()
    with pytest.raises(ckpt.InvalidArgument, match="async_staging_prepare"):
        ckpt.open(root, async_staging_prepare_bytes=-1)


def test_a_handle_shows_its_step_root_and_whether_it_is_done(mgr, root):
    handle = mgr.save_async(3, {"w": np.zeros(4, np.float32)})
    shown = repr(handle)
    assert shown.startswith("ckpt.AsyncSave(step=3, root=")
    assert shown.endswith(("running)", "done)"))
    handle.wait()
    mgr.close()
    assert repr(handle) == f"ckpt.AsyncSave(step=3, root={mgr.url!r}, done)"


def test_a_failure_the_next_save_raised_is_not_raised_again_by_close(root):
    # A job that saved asynchronously without waiting, met the failure at
    # its next save and stopped there: close() (or the end of a with
    # block) does not raise it a second time.
    mgr = ckpt.open(root, create=True)
    mgr.save(1, {"x": np.zeros(1)})
    mgr.save_async(1, {"x": np.zeros(1)})  # fails: step 1 is committed
    with pytest.raises(ckpt.AlreadyExists, match="step 2 was not saved"):
        mgr.save(2, {"x": np.zeros(1)})
    mgr.close()
    assert [i.step for i in ckpt.open(root).list()] == [1]
