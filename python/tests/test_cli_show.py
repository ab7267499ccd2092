"""`ckpt show` of a root the Python package saved: the package's own
__python_tree__ entry (how nested containers are rebuilt) is not the
user's state, so it is left out unless --all asks for it."""

import json
import subprocess
import sys

import ckpt


def show(*args, command="show"):
    r = subprocess.run([sys.executable, "-m", "ckpt", command, *args],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_show_hides_the_packages_internal_entry_unless_all(tmp_path):
    root = str(tmp_path / "run")
    ckpt.open(root, create=True).save(1, {"model": {"w": b"\x01\x02"},
                                          "step": 1})
    text = show(root)
    assert "model.w" in text and "step" in text
    assert "__python_tree__" not in text
    assert "1 internal entry of the Python package hidden" in text
    names = [e["name"] for e in json.loads(show(root, "--json"))["entries"]]
    assert "__python_tree__" not in names and "model.w" in names
    assert "__python_tree__" in show(root, "--all")
    names = [e["name"] for e in
             json.loads(show(root, "--json", "--all"))["entries"]]
    assert "__python_tree__" in names


def test_diff_lists_the_users_entries_and_says_the_tree_differs(tmp_path):
    root = str(tmp_path / "run")
    mgr = ckpt.open(root, create=True)
    mgr.save(1, {"model": {"w": b"\x01"}, "step": 1})
    mgr.save(2, {"model": {"w": b"\x02", "b": b"\x03"}, "step": 2})
    text = show(root, "--step", "1", "2", command="diff")
    assert "+ model.b" in text and "~ model.w" in text
    assert "__python_tree__" not in text
    assert "1 internal entry of the Python package differs as well" in text
    assert "~ __python_tree__" in show(root, "--step", "1", "2", "--all",
                                       command="diff")
    out = json.loads(show(root, "--step", "1", "2", "--json",
                          command="diff"))
    assert out["added"] == ["model.b"]
    assert out["internal_entries_differing"] == 1


def test_python_counts_and_lists_the_entries_show_lists(tmp_path):
    root = str(tmp_path / "run")
    mgr = ckpt.open(root, create=True)
    state = {"a": b"\x01", "b": b"\x02", "c": {"d": b"\x03"}}
    saved = mgr.save(1, state)
    shown = json.loads(show(root, "--json"))
    users = [e["name"] for e in shown["entries"]]
    assert sorted(users) == ["a", "b", "c.d"]
    assert shown["hidden_internal_entries"] == 1
    described = mgr.describe()
    assert [e.name for e in described.entries] == users
    assert described.hidden_internal_entries == 1
    infos = [saved.info, mgr.list()[0], described.info,
             mgr.save_async(2, state).wait().info,
             mgr.load_into(state, 1)]
    for info in infos:
        assert (info.num_entries, info.internal_entries) == (3, 1), info
    # The command line counts alike (the library's count).
    listed = json.loads(show(root, "--json", command="ls"))
    assert [(i["num_entries"], i["internal_entries"]) for i in listed] == \
        [(3, 1), (3, 1)]
    assert (shown["info"]["num_entries"],
            shown["info"]["internal_entries"]) == (3, 1)
    everything = mgr.describe(internal=True)
    assert "__python_tree__" in [e.name for e in everything.entries]
    assert everything.hidden_internal_entries == 0
    assert everything.info.num_entries == 3
