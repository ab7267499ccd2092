"""A root is made by a save or by create=True, never by a read: reading a
root that does not exist (a mistyped path) is ckpt.NotFound naming it."""

import os

import numpy as np
import pytest

import ckpt


def test_reading_a_missing_root_names_it_and_creates_nothing(tmp_path):
    path = str(tmp_path / "tpyo")
    mgr = ckpt.open(path)
    for read in (mgr.latest, mgr.list, mgr.load, mgr.describe,
                 lambda: mgr.load_into({"x": np.zeros(1)})):
        with pytest.raises(ckpt.NotFound, match=f"root {path} does not "
                                                f"exist.*create=True"):
            read()
    assert not os.path.exists(path)


def test_a_save_creates_the_root(tmp_path):
    path = str(tmp_path / "new" / "run")
    mgr = ckpt.open(f"file://{path}")
    with pytest.raises(ckpt.NotFound, match=path):
        mgr.latest()
    mgr.save(1, {"x": np.ones(2)})
    assert os.path.isdir(path)
    assert mgr.latest() == 1
    assert ckpt.open(path).latest() == 1


def test_a_root_named_with_a_tilde_says_it_is_not_the_home_folder(
        tmp_path, capfd, monkeypatch):
    # "~/run" from Python is a folder named ~ under the current one (no
    # shell expands it): the warning says so, so that no one looks for the
    # job in their home folder, or removes the wrong ~.
    monkeypatch.chdir(tmp_path)
    ckpt.open("~/run", create=True).close()
    assert os.path.isdir(tmp_path / "~" / "run")
    err = capfd.readouterr().err
    assert "created a new, empty root ~/run" in err, err
    assert "not the home folder" in err, err


def test_create_true_starts_a_new_job_and_says_so_once(tmp_path, capfd):
    path = str(tmp_path / "run")
    assert ckpt.open(path, create=True).latest() is None
    assert os.path.isdir(path)
    # One line naming the new root: a mistyped path is no silent fresh
    # start. Opening it again starts nothing and says nothing.
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "created a new, empty root" in err and \
        path in err, err
    assert ckpt.open(path, create=True).latest() is None
    assert capfd.readouterr().err == ""


def test_create_false_refuses_to_open(tmp_path):
    with pytest.raises(ckpt.NotFound):
        ckpt.open(tmp_path / "absent", create=False)
    assert not os.path.exists(tmp_path / "absent")


def test_a_root_made_meanwhile_is_read(tmp_path):
    path = str(tmp_path / "run")
    reader = ckpt.open(path)
    ckpt.open(path).save(1, {"x": np.ones(2)})
    assert reader.latest() == 1


def test_torch_latest_of_a_missing_root_is_an_error(tmp_path):
    torch = pytest.importorskip("torch")
    import ckpt.torch as ct
    path = str(tmp_path / "tpyo")
    try:
        with pytest.raises(ckpt.NotFound, match="does not exist"):
            ct.latest(path)
        with pytest.raises(ckpt.NotFound, match="does not exist"):
            ct.load({"x": torch.zeros(1)}, path)
        assert not os.path.exists(path)
        assert ct.latest(path, create=True) is None
        assert os.path.isdir(path)
        ct.save({"x": torch.ones(1)}, path, 1)
        assert ct.latest(path) == 1
    finally:
        ct.close()
