"""Bad input from Python: what a checkpoint cannot hold exactly is refused
before a byte is written, with ckpt.InvalidArgument (a ValueError) naming
where in the state it is; a damaged tree description (the __python_tree__
entry) is ckpt.DataLoss naming the checkpoint.

NumPy is not needed: the tensors here are array.arrays.
"""

import array
import copy
import json
import os
import random
import uuid

import pytest

import ckpt
from ckpt import _tree

TREE = _tree.TREE_ENTRY
LONE = "\udc80"  # a lone surrogate: a Python str, but not Unicode text


def assert_nothing_written(mgr, root):
    """A refused save leaves the root as ckpt.open left it: empty (no step,
    no LATEST, not even the lease the first save takes)."""
    assert os.listdir(root) == []
    assert mgr.list() == [] and mgr.latest() is None


def refused(mgr, root, state, match, **options):
    with pytest.raises(ckpt.InvalidArgument, match=match) as e:
        mgr.save(1, state, **options)
    assert isinstance(e.value, ValueError)
    assert_nothing_written(mgr, root)
    return str(e.value)


def nest_dicts(n, leaf):
    """A state of n dicts, one inside the other, the innermost holding leaf."""
    for _ in range(n - 1):
        leaf = {"k": leaf}
    return {"k": leaf}


def nest_lists(n, leaf, kind=list):
    for _ in range(n):
        leaf = kind([leaf])
    return leaf


# --- integers -------------------------------------------------------------

def test_int_keys_beyond_64_bits_are_refused(mgr, root):
    msg = refused(mgr, root, {"a": {1 << 64: 1}}, "64 bits")
    assert "state['a']" in msg
    refused(mgr, root, {-(1 << 63) - 1: 1}, "64 bits")
    refused(mgr, root, {"a": [{10 ** 30: "x"}]}, r"state\['a'\]\[0\]")


def test_int_keys_at_the_64_bit_limits_round_trip(mgr):
    state = {"d": {-(1 << 63): 1, (1 << 64) - 1: 2, (1 << 63) - 1: 3, 0: 4}}
    mgr.save(1, state)
    got = mgr.load()
    assert got == state
    assert all(type(k) is int for k in got["d"])
    assert list(got["d"]) == list(state["d"])


def test_int_values_beyond_64_bits_round_trip(mgr):
    state = {"big": 1 << 70, "neg": -(1 << 64), "huge": [10 ** 40, (-3) ** 99],
             "edge": (1 << 63) - 1, "low": -(1 << 63)}
    mgr.save(1, state)
    got = mgr.load()
    assert got == state
    assert type(got["big"]) is int and type(got["huge"][1]) is int


def test_metadata_ints_beyond_64_bits_are_refused(mgr, root):
    msg = refused(mgr, root, {"cfg": ckpt.Metadata(seed=1 << 64)},
                  "does not fit in 64 bits")
    assert "'cfg'" in msg and "['seed']" in msg
    refused(mgr, root, {"cfg": ckpt.Metadata(x=[0, -(1 << 63) - 1])},
            r"\['x'\]\[1\]")
    meta = ckpt.Metadata(hi=(1 << 64) - 1, lo=-(1 << 63))
    mgr.save(1, {"cfg": meta})
    assert mgr.load()["cfg"] == meta


# --- depth ----------------------------------------------------------------

def test_deepest_dicts_round_trip_one_more_is_refused(mgr, root):
    # The description nests 3 JSON levels per dict below its root node.
    msg = refused(mgr, root, nest_dicts(21, 1), "nest too deep")
    assert "state" + "['k']" * 20 + ":" in msg
    refused(mgr, root, nest_dicts(20, {}), "nest too deep")
    refused(mgr, root, nest_dicts(20, []), "nest too deep")
    for step, state in enumerate([nest_dicts(20, 1), nest_dicts(19, {}),
                                  nest_dicts(19, ())]):
        mgr.save(step, state)
        assert mgr.load(step) == state


def test_deepest_lists_and_tuples_round_trip_one_more_is_refused(mgr, root):
    # {"a": ...}: a dict (3 levels), then 2 per list or tuple: the leaf of
    # 28 lists sits 60 levels deep, an empty container's array there 61.
    for kind in (list, tuple):
        msg = refused(mgr, root, {"a": nest_lists(29, 1, kind)},
                      "nest too deep")
        assert "state['a']" + "[0]" * 28 + ":" in msg
        refused(mgr, root, {"a": nest_lists(29, [], kind)}, "nest too deep")
    step = 0
    for kind in (list, tuple):
        for state in ({"a": nest_lists(28, 1, kind)},
                      {"a": nest_lists(28, {}, kind)},
                      {"a": nest_lists(28, [], kind)}):
            step += 1
            mgr.save(step, state)
            assert mgr.load(step) == state


def test_a_very_deep_state_is_refused_not_a_recursion_error(mgr, root):
    refused(mgr, root, nest_dicts(5000, 1), "nest too deep")
    refused(mgr, root, {"a": nest_lists(100000, 1)}, "nest too deep")


def test_deep_metadata_is_refused_at_the_library_limit(mgr, root):
    # A value may sit inside at most 61 arrays and objects of the entry.
    msg = refused(mgr, root, {"cfg": ckpt.Metadata(x=nest_lists(61, 1))},
                  "nests deeper than 61")
    assert "'cfg'" in msg and "['x']" + "[0]" * 60 in msg
    refused(mgr, root, {"cfg": ckpt.Metadata(x=nest_lists(61, []))},
            "nests deeper")
    refused(mgr, root, {"cfg": ckpt.Metadata(x=nest_lists(5000, 1))},
            "nests deeper")
    ok = {"a": ckpt.Metadata(x=nest_lists(60, 1)),
          "b": ckpt.Metadata(x=nest_lists(60, []))}
    mgr.save(1, ok)
    assert mgr.load() == ok


# --- cycles ---------------------------------------------------------------

def test_a_dict_containing_itself_is_refused(mgr, root):
    d = {"x": 1}
    d["self"] = d
    msg = refused(mgr, root, {"a": d}, "contains itself")
    assert "state['a']['self'] is state['a'] itself" in msg
    state = {"w": 1}
    state["again"] = state
    refused(mgr, root, state, r"state\['again'\] is state itself")


def test_indirect_cycles_are_refused(mgr, root):
    lst = []
    lst.append({"t": (1, lst)})
    msg = refused(mgr, root, {"a": [0, lst]}, "contains itself")
    assert "state['a'][1][0]['t'][1] is state['a'][1] itself" in msg
    lst = []
    lst.append(lst)
    refused(mgr, root, {"l": lst}, r"state\['l'\]\[0\] is state\['l'\]")


def test_a_cycle_in_metadata_is_refused(mgr, root):
    inner = []
    inner.append(inner)
    refused(mgr, root, {"cfg": ckpt.Metadata(x=inner)}, "contains itself")
    meta = ckpt.Metadata(a=1)
    meta["me"] = meta
    refused(mgr, root, {"cfg": meta}, "contains itself")


def test_a_cycle_in_a_save_async_state_is_refused(mgr, root):
    d = {}
    d["d"] = d
    with pytest.raises(ckpt.InvalidArgument, match="contains itself"):
        mgr.save_async(1, {"d": d})
    assert_nothing_written(mgr, root)


def test_load_into_refuses_a_cyclic_state(mgr):
    mgr.save(1, {"a": 1})
    d = {"a": 0}
    d["d"] = d
    with pytest.raises(ckpt.InvalidArgument, match="contains itself"):
        mgr.load_into(d)


def test_a_container_shared_twice_is_not_a_cycle(mgr):
    shared = {"w": array.array("f", [1.0, 2.0]), "n": 3}
    pair = [shared, shared]
    state = {"a": shared, "b": {"again": shared}, "p": (pair, pair)}
    mgr.save(1, state)
    got = mgr.load()
    assert got["a"]["n"] == got["b"]["again"]["n"] == 3
    assert got["p"][1][1]["n"] == 3
    assert [e.name for e in mgr.describe().entries if e.kind == "tensor"] \
        == sorted(["a.w", "b.again.w", "p.0.0.w", "p.0.1.w", "p.1.0.w",
                   "p.1.1.w"])
    meta = ckpt.Metadata(x=[1, 2])
    meta["y"] = meta["x"]
    mgr.save(2, {"m": meta})
    assert mgr.load(2)["m"] == {"x": [1, 2], "y": [1, 2]}


# --- text -----------------------------------------------------------------

def test_keys_with_lone_surrogates_are_refused(mgr, root):
    msg = refused(mgr, root, {"a": [{LONE: 1}]}, "lone surrogate")
    assert "state['a'][0]" in msg
    refused(mgr, root, {"x" + LONE + "y": 1}, "character 1")


def test_keys_with_a_nul_are_refused(mgr, root):
    # The library takes entry names as C strings: a NUL would cut one short.
    msg = refused(mgr, root, {"a": {"b\0": 1}}, "NUL")
    assert "state['a']" in msg


def test_str_values_with_lone_surrogates_are_refused(mgr, root):
    msg = refused(mgr, root, {"a": {"b": ["ok", "x" + LONE]}},
                  "lone surrogate")
    assert "'a.b.1'" in msg


def test_metadata_with_lone_surrogates_is_refused(mgr, root):
    msg = refused(mgr, root, {"cfg": ckpt.Metadata(x={"y": [LONE]})},
                  "lone surrogate")
    assert "'cfg'" in msg and "['x']['y'][0]" in msg
    refused(mgr, root, {"cfg": ckpt.Metadata({LONE: 1})}, "lone surrogate")


def test_save_metadata_and_metric_names_are_checked(mgr, root):
    refused(mgr, root, {"a": 1}, r"metadata key '\\udc80'",
            metadata={LONE: "x"})
    refused(mgr, root, {"a": 1}, r"metadata\['git'\]",
            metadata={"git": "abc" + LONE})
    refused(mgr, root, {"a": 1}, "NUL", metadata={"git": "a\0b"})
    refused(mgr, root, {"a": 1}, "NUL", metadata={"g\0": "x"})
    refused(mgr, root, {"a": 1}, "metric name", metrics={"loss" + LONE: 1.0})
    refused(mgr, root, {"a": 1}, "NUL", metrics={"l\0ss": 1.0})


def test_text_that_is_unicode_round_trips(mgr):
    state = {"\U0001F600": "\U0001F600", "nul": "a\0b", "sep": "\u2028",
             "cfg": ckpt.Metadata({"k\0": "\ud7ff\ue000\U0010FFFF"})}
    mgr.save(1, state, metadata={"note": "\u00e9\U0001F600"})
    assert mgr.load() == state
    assert mgr.list()[0].metadata == {"note": "\u00e9\U0001F600"}


def test_a_refused_save_leaves_the_manager_usable(mgr, root):
    d = {}
    d["d"] = d
    refused(mgr, root, d, "contains itself")
    mgr.save(1, {"a": 1})
    assert mgr.load() == {"a": 1}
    assert any(n.startswith("step-") for n in os.listdir(root))


# --- a damaged tree description -------------------------------------------

STATE = {"w": array.array("f", [1.0, 2.0, 3.0]), "n": 1, "s": "x",
         "d": {"a": [1, (2, "y")], 3: b"blob", "e": {}, "l": []},
         "t": ()}


def save_raw(mgr, step, tree, state=STATE):
    """Saves `state` with `tree` (an object, or JSON text) as its tree
    description, as a writer with a bug (or an attacker) could."""
    entries = [e for e in mgr._entries(state) if e[0] != TREE]
    text = tree if isinstance(tree, str) else json.dumps(tree)
    entries.append((TREE, "metadata", text, None, None))
    mgr._m.save(step, entries, -1, {}, {}, False, {})


def good_tree(state=STATE):
    return _tree.flatten(state)[1]


def assert_damaged(mgr, step, match=""):
    with pytest.raises(ckpt.DataLoss, match=match) as e:
        mgr.load(step)
    msg = str(e.value)
    assert f"step {step} in {mgr.url}" in msg
    assert f"{TREE} entry" in msg and "damaged" in msg
    return msg


def test_an_intact_raw_tree_loads(mgr):
    save_raw(mgr, 1, good_tree())
    got = mgr.load(1)
    assert got["d"] == STATE["d"] and got["t"] == () and got["n"] == 1
    assert list(got) == list(STATE)


@pytest.mark.parametrize("tree, match", [
    ({"root": {"dict": []}}, "version is None"),
    ({"version": True, "root": {"dict": []}}, "version is True"),
    ({"version": 1.0, "root": {"dict": []}}, "version is 1.0"),
    ({"version": 1}, "keys"),
    ({"version": 1, "root": {"dict": []}, "extra": 0}, "keys"),
    ({"version": 1, "root": {"list": []}}, "not a dict node"),
    ({"version": 1, "root": "w"}, "not a dict node"),
    ({"version": 1, "root": {"dict": {}}}, "unknown node"),
    ({"version": 1, "root": {"dict": [["w", "w", "w"]]}}, "pair"),
    ({"version": 1, "root": {"dict": [["w"]]}}, "pair"),
    ({"version": 1, "root": {"dict": ["w"]}}, "pair"),
    ({"version": 1, "root": {"dict": [[1.5, "w"]]}}, "key 1.5"),
    ({"version": 1, "root": {"dict": [[None, "w"]]}}, "key None"),
    ({"version": 1, "root": {"dict": [[True, "w"]]}}, "key True"),
    ({"version": 1, "root": {"dict": [[["k"], "w"]]}}, "key"),
    ({"version": 1, "root": {"dict": [["k", "w"], ["k", "n"]]}},
     "key 'k' twice"),
    ({"version": 1, "root": {"dict": [["k", "w"], ["j", "w"]]}},
     "'w' twice"),
    ({"version": 1, "root": {"dict": [["k", {"list": ["w", "w"]}]]}},
     "'w' twice"),
    ({"version": 1, "root": {"dict": [["k", "nope"]]}}, "'nope'"),
    ({"version": 1, "root": {"dict": []}}, "leaves out the entry 'w'"),
    ({"version": 1, "root": {"dict": [["k", {"set": []}]]}}, "unknown node"),
    ({"version": 1, "root": {"dict": [["k", {"list": [], "tuple": []}]]}},
     "neither"),
    ({"version": 1, "root": {"dict": [["k", {}]]}}, "neither"),
    ({"version": 1, "root": {"dict": [["k", {"tuple": "w"}]]}},
     "unknown node"),
    ({"version": 1, "root": {"dict": [["k", 7]]}}, "neither"),
    ({"version": 1, "root": {"dict": [["k", None]]}}, "neither"),
    ({"version": 1, "root": {"dict": [["k", ["w"]]]}}, "neither"),
])
def test_a_hostile_tree_is_data_loss(mgr, tree, match):
    state = {"w": array.array("f", [1.0])}
    save_raw(mgr, 5, tree, state)
    assert_damaged(mgr, 5, match)


def test_a_tree_of_a_newer_version_is_failed_precondition(mgr):
    save_raw(mgr, 2, {"version": 2, "root": {"dict": []}, "new": 1},
             {"w": b"x"})
    with pytest.raises(ckpt.FailedPrecondition, match="version 2") as e:
        mgr.load(2)
    assert f"step 2 in {mgr.url}" in str(e.value)


@pytest.mark.parametrize("stored", [
    '{"python_type":"int","value":[1]}',
    '{"python_type":"int","value":"12x"}',
    '{"python_type":"bool","value":1}',
    '{"python_type":"float","value":"fast"}',
    '{"python_type":"str","value":7}',
    '{"python_type":"none","value":0}',
    '{"python_type":"int","value":"--5"}',
    '{"python_type":"int","value":"' + "1" * 5000 + '"}',
    '{"python_type":"metadata","value":7}',
    '{"python_type":"metadata","value":{"a":1}}',
])
def test_a_damaged_typed_scalar_is_data_loss_naming_it(mgr, stored):
    saved = {"w": array.array("f", [1.0, 2.0]), "n": 1}
    entries = [e for e in mgr._entries(saved) if e[0] != "n"]
    entries.append(("n", "metadata", stored, None, None))
    mgr._m.save(1, entries, -1, {}, {}, False, {})
    with pytest.raises(ckpt.DataLoss, match="entry 'n'") as e:
        mgr.load(1)
    assert f"step 1 in {mgr.url}" in str(e.value)
    # All or nothing: the array the load would fill is left as it was.
    target = {"w": array.array("f", [0.0, 0.0]), "n": 0}
    with pytest.raises(ckpt.DataLoss, match="entry 'n'"):
        mgr.load_into(target)
    assert target == {"w": array.array("f", [0.0, 0.0]), "n": 0}


def test_metadata_with_the_keys_of_a_typed_scalar_loads_as_saved(mgr):
    # A user's map that happens to have ckpt's keys for a typed scalar.
    maps = [{"python_type": "float", "value": "any real number"},
            {"python_type": "int", "value": "7"}, {"python_type": "none"},
            {"python_type": "metadata", "value": {"python_type": "str"}}]
    state = {f"m{i}": ckpt.Metadata(m) for i, m in enumerate(maps)}
    mgr.save(1, state)
    loaded = mgr.load(1)
    assert loaded == state
    assert all(isinstance(v, ckpt.Metadata) for v in loaded.values())
    target = {k: None for k in state}
    mgr.load_into(target)
    assert target == state


def test_a_resume_skips_a_step_whose_scalar_does_not_decode(mgr):
    mgr.save(1, {"w": array.array("f", [1.0, 1.0]), "n": 1})
    saved = {"w": array.array("f", [2.0, 2.0]), "n": 2}
    entries = [e for e in mgr._entries(saved) if e[0] != "n"]
    entries.append(("n", "metadata", '{"python_type":"int","value":"--5"}',
                    None, None))
    mgr._m.save(2, entries, -1, {}, {}, False, {})
    with pytest.warns(RuntimeWarning, match="skipped step 2.*entry 'n'"):
        assert mgr.load()["n"] == 1
    target = {"w": array.array("f", [0.0, 0.0]), "n": 0}
    with pytest.warns(RuntimeWarning, match="skipped step 2.*entry 'n'"):
        assert mgr.load_into(target).step == 1
    assert target == {"w": array.array("f", [1.0, 1.0]), "n": 1}
    with pytest.raises(ckpt.DataLoss, match="entry 'n'"):
        mgr.load(2)


def test_load_into_does_not_read_the_tree(mgr):
    save_raw(mgr, 1, {"version": 1, "root": {"dict": [["k", 7]]}})
    assert_damaged(mgr, 1)
    target = {"w": array.array("f", [0.0] * 3), "n": 0, "s": "",
              "d": {"a": [0, (0, "")], 3: b"", "e": {}, "l": []}, "t": ()}
    assert mgr.load_into(target, strict=True).step == 1
    assert target["w"] == STATE["w"] and target["d"] == STATE["d"]
    assert (target["n"], target["s"]) == (1, "x")


def test_unflatten_turns_any_malformation_into_data_loss():
    # The JSON text is checked too (the library refuses to store text that
    # does not parse, but a tree may come from elsewhere).
    for text in ["", "{", "[]", "null", '{"version": 1, "root": ',
                 '"\\ud800"', "1e999"]:
        with pytest.raises(ckpt.DataLoss, match="step 3 in mem://x"):
            _tree.unflatten(text, {}, frozenset(), "step 3 in mem://x")
    deep = {"dict": []}
    for _ in range(100000):
        deep = {"list": [deep]}
    with pytest.raises(ckpt.DataLoss):
        _tree.unflatten({"version": 1, "root": {"dict": [["k", deep]]}}, {})


# --- fuzz: randomly mutated tree descriptions ------------------------------

_JUNK = [None, True, False, 0, -1, 1, 2, 1 << 70, -(1 << 64), 1.5, 1e300,
         "", "w", "n", "s", "d.3", "nope", TREE, [], [[]], {}, ["w"],
         {"dict": []}, {"list": []}, {"tuple": []}, {"dict": {}},
         {"list": None}, {"tuple": "w"}, {"set": ["w"]}, {"dict": [["k"]]},
         {"dict": [["k", "w", 1]]}, {"dict": [[1.5, "n"]]},
         {"dict": [["k", "n"]], "list": []}, {"list": ["n", "n"]},
         {"dict": [["a", "s"], ["a", "t"]]}, {"version": 1}]


def _nodes(obj, out):
    """Every (container, key) of obj: the places a mutation can hit."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append((obj, k))
            _nodes(v, out)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.append((obj, i))
            _nodes(v, out)
    return out


def _leaf_names(tree):
    return [c[k] for c, k in _nodes(tree, []) if isinstance(c[k], str)
            and not (isinstance(c, list) and len(c) == 2 and k == 0)]


def _mutate(tree, rng):
    places = _nodes(tree, [])
    container, key = rng.choice(places)
    how = rng.randrange(12)
    if how in (0, 10, 11):
        container[key] = copy.deepcopy(rng.choice(_JUNK))
    elif how == 1:
        del container[key]
    elif how == 2 and isinstance(container, dict):
        new = rng.choice(["dict", "list", "tuple", "root", "version", "x",
                          "Dict", ""])
        container[new] = container.pop(key)
    elif how == 3:
        names = _leaf_names(tree)
        if names:
            container[key] = rng.choice(names)  # a leaf named twice, or a
                                                # node become a leaf
    elif how == 4 and isinstance(container[key], dict) and container[key]:
        node = container[key]
        [(kind, children)] = list(node.items())[:1]
        node.pop(kind)
        node[rng.choice(["dict", "list", "tuple"])] = children
    elif how == 5:
        for _ in range(rng.randrange(1, 32)):
            container[key] = rng.choice([{"list": [container[key]]},
                                         {"tuple": [container[key]]},
                                         {"dict": [["k", container[key]]]}])
    elif how == 6:
        container[key] = rng.choice([1 << 64, -(1 << 63) - 1, 10 ** 30,
                                     2 ** 63, -(2 ** 63), 3.0])
    elif how == 7 and isinstance(container, list):
        container.append(copy.deepcopy(container[key]))  # duplicate a pair
    elif how == 8:
        container[key] = [container[key]] if rng.random() < .5 else {
            "dict": container[key]}
    elif how == 9:
        tree["version"] = rng.choice([0, 2, -1, 1 << 40, "1", None, [1]])


def test_fuzz_mutated_trees_load_or_raise_data_loss():
    rng = random.Random(20240517)
    mgr = ckpt.open(f"mem://bad-input-fuzz-{uuid.uuid4().hex}")
    base = good_tree()
    outcomes = {"loaded": 0, "data_loss": 0, "newer": 0, "not_stored": 0}
    for step in range(400):
        tree = copy.deepcopy(base)
        for _ in range(rng.choice([1, 1, 2, 3])):
            _mutate(tree, rng)
        try:
            save_raw(mgr, step, tree)
        except ckpt.Error:  # not a JSON object the library will store
            outcomes["not_stored"] += 1
            continue
        try:
            mgr.load(step)
        except ckpt.DataLoss as e:
            assert f"step {step} in {mgr.url}" in str(e), str(e)
            outcomes["data_loss"] += 1
        except ckpt.FailedPrecondition:
            version = tree.get("version")
            assert type(version) is int and version != 1, tree
            outcomes["newer"] += 1
        else:
            outcomes["loaded"] += 1
    assert outcomes["data_loss"] > 200 and outcomes["newer"] > 5, outcomes
    assert outcomes["loaded"] > 0 and outcomes["not_stored"] < 100, outcomes


def test_a_shape_numpy_cannot_make_is_a_clear_error(tmp_path):
    # [0, 2**62] holds no byte and torch makes it, but NumPy's size
    # overflows: the load names the entry and its shape, not NumPy's
    # ValueError from inside the package.
    torch = pytest.importorskip("torch")
    root = str(tmp_path / "shapes")
    with ckpt.open(root, create=True) as mgr:
        mgr.save(1, {"t": torch.empty((0, 2**62)), "w": torch.ones(2)})
    with ckpt.open(root) as mgr:
        with pytest.raises(ckpt.InvalidArgument,
                           match=r"entry 't' \(F32 \[0, 4611686018427387904\]"
                                 r"\) cannot be made here"):
            mgr.load()
