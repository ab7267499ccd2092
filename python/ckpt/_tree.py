"""Nested containers <-> flat, dotted entry names.

A state is a dict whose values may be dicts, lists and tuples in turn; each
leaf becomes one checkpoint entry named by its path, joined with dots:
{"model": {"fc.weight": w}} holds the entry "model.fc.weight". Because keys
may contain dots themselves (PyTorch's state_dict keys do), the path alone
cannot say where the containers were. So every save also writes one metadata
entry, TREE_ENTRY, that records the containers exactly: which were dicts,
lists or tuples, each dict's keys in order with their type (str or int), and
which entry each leaf is. Loading rebuilds the containers from it.

A checkpoint without that entry (one written from C++) is rebuilt by
splitting names at dots into nested dicts.

What the checkpoint cannot hold exactly is refused by flatten, before
anything is written: a cycle, containers nested deeper than a metadata
entry's JSON may nest, a key or text that is not Unicode, an int key beyond
64 bits. On load, a tree description that is not exactly what flatten
writes is ckpt.DataLoss naming the checkpoint.
"""

import json
import warnings
from collections.abc import Mapping

from ckpt import _errors

TREE_ENTRY = "__python_tree__"
TREE_VERSION = 1
# How DCP's flat names map to its nested keys (its Metadata.planner_data),
# which ckpt.torch.StorageWriter and `ckpt import-dcp` record beside a
# step's entries for StorageReader to hand back to DCP.
DCP_PLANNER_ENTRY = "__dcp_planner_data__"
# The package's own entries: never a value of the state, so loads leave
# them out and strict loads do not ask the state for them.
PACKAGE_ENTRIES = frozenset((TREE_ENTRY, DCP_PLANNER_ENTRY))

# The library refuses a metadata entry whose JSON nests a value inside more
# than this many arrays and objects (its JSON parser reads 64 levels; the
# manifest that holds the entry takes 3).
MAX_JSON_DEPTH = 64 - 3

# The integers that the library's JSON keeps exact (int64 and uint64); it
# reads any other integer as a float.
_JSON_INT_MIN, _JSON_INT_MAX = -(1 << 63), (1 << 64) - 1

# How many JSON levels a container takes in the tree description, from its
# node to its children: {"dict": [[key, child], ...]}, {"list": [child]}.
_DICT_LEVELS, _SEQ_LEVELS = 3, 2


class Metadata(dict):
    """A dict saved as one metadata entry (a JSON object), not flattened.

    Metadata entries that C++ wrote with State::AddMetadata load as Metadata;
    saving one back writes the same JSON object. Its values must be
    JSON-serializable: str (Unicode text), int (64 bits: int64 or uint64),
    finite float, bool, None, and lists, tuples (they load as lists) and
    dicts (their keys load as str) of these, no value inside more than
    MAX_JSON_DEPTH of them.
    """


def _is_container(value):
    return (isinstance(value, (Mapping, list, tuple))
            and not isinstance(value, Metadata))


def text_problem(text, c_string=False):
    """Why `text` cannot be stored as UTF-8 (a lone surrogate), or None.
    With c_string (text the library takes as a C string: names, the
    manifest's metadata), a NUL character, which would end it, is one too."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return (f"character {e.start} ({text[e.start]!r}) is a lone "
                f"surrogate, not Unicode text")
    if c_string and "\0" in text:
        return f"character {text.index(chr(0))} is a NUL"
    return None


# The walks below are module-level functions, not nested closures: a closure
# that calls itself is a reference cycle, which would keep every array it has
# seen alive until the cycle collector happens to run.


def flatten(state):
    """Returns ([(name, path, leaf)], tree) for a state dict.

    `path` is the tuple of keys and indices that leads to the leaf; `tree` is
    the JSON-able description that `unflatten` rebuilds the containers from.
    """
    if not isinstance(state, Mapping) or isinstance(state, Metadata):
        raise _errors.InvalidArgument(
            f"a state must be a dict, not {type(state).__name__}")
    leaves = []
    # The root node sits one level inside the tree description's object.
    root = _flatten(state, (), leaves, {}, {}, 1)
    return leaves, {"version": TREE_VERSION, "root": root}


def _flatten(value, path, leaves, seen, active, depth):
    """The tree node of `value` at `path`, whose node the description nests
    `depth` levels deep. `active` maps the id of each container on the way
    to `value` to its path."""
    if not _is_container(value):
        return _leaf(value, path, leaves, seen)
    if id(value) in active:
        raise _errors.InvalidArgument(
            f"{_show(path)} is {_show(active[id(value)])} itself: a state "
            f"that contains itself cannot be saved")
    is_dict = isinstance(value, Mapping)
    levels = _DICT_LEVELS if is_dict else _SEQ_LEVELS
    # A child node lies `levels` deeper; an empty container's array, one.
    if depth + (levels if len(value) else 1) > MAX_JSON_DEPTH:
        raise _errors.InvalidArgument(
            f"{_show(path)}: the containers nest too deep to save (their "
            f"description may nest {MAX_JSON_DEPTH} JSON levels, a dict "
            f"taking {_DICT_LEVELS} and a list or tuple {_SEQ_LEVELS})")
    active[id(value)] = path
    try:
        if is_dict:
            items = []
            for key, child in value.items():
                _check_key(key, path)
                items.append([key, _flatten(child, path + (key,), leaves,
                                            seen, active, depth + levels)])
            return {"dict": items}
        kind = "tuple" if isinstance(value, tuple) else "list"
        return {kind: [_flatten(child, path + (i,), leaves, seen, active,
                                depth + levels)
                       for i, child in enumerate(value)]}
    finally:
        del active[id(value)]


def _check_key(key, path):
    if type(key) is str and key.isascii() and "\0" not in key:
        return  # the common key, fine without encoding it
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        raise _errors.InvalidArgument(
            f"key {key!r} at {_show(path)}: keys must be str or int")
    if isinstance(key, int):
        if not _JSON_INT_MIN <= key <= _JSON_INT_MAX:
            raise _errors.InvalidArgument(
                f"key {key!r} at {_show(path)}: an int key must fit in 64 "
                f"bits (int64 or uint64)")
        return
    problem = text_problem(key, c_string=True)
    if problem is not None:
        raise _errors.InvalidArgument(
            f"key {key!r} at {_show(path)}: {problem}")


def _leaf(value, path, leaves, seen):
    name = ".".join(map(str, path))
    if name in PACKAGE_ENTRIES:
        raise _errors.InvalidArgument(
            f"entry name {name!r} is reserved by ckpt")
    if name in seen:
        raise _errors.InvalidArgument(
            f"{_show(seen[name])} and {_show(path)} both make the entry name "
            f"{name!r}")
    seen[name] = path
    leaves.append((name, path, value))
    return name


def check_json(name, obj):
    """Refuses, naming the place in entry `name`, what of the JSON object
    `obj` (a Metadata's contents) the checkpoint cannot hold exactly: text
    that is not Unicode, an int beyond 64 bits, nesting deeper than
    MAX_JSON_DEPTH, a cycle. Other values are left to json.dumps."""
    _check_json(name, obj, (), 0, set())


def _check_json(name, obj, path, depth, active):
    if depth > MAX_JSON_DEPTH:
        raise _bad_json(name, path, f"nests deeper than {MAX_JSON_DEPTH} "
                                    f"levels, the most a metadata entry may")
    if isinstance(obj, str):
        problem = text_problem(obj)
        if problem is not None:
            raise _bad_json(name, path, problem)
    elif isinstance(obj, int) and not isinstance(obj, bool):
        if not _JSON_INT_MIN <= obj <= _JSON_INT_MAX:
            raise _bad_json(name, path, f"the int {obj} does not fit in 64 "
                                        f"bits (int64 or uint64)")
    elif isinstance(obj, (dict, list, tuple)):
        if id(obj) in active:
            raise _bad_json(name, path, "contains itself")
        active.add(id(obj))
        if isinstance(obj, dict):
            for key, child in obj.items():
                if isinstance(key, str):
                    problem = text_problem(key)
                    if problem is not None:
                        raise _bad_json(name, path, f"key {key!r}: {problem}")
                _check_json(name, child, path + (key,), depth + 1, active)
        else:
            for i, child in enumerate(obj):
                _check_json(name, child, path + (i,), depth + 1, active)
        active.discard(id(obj))


def _bad_json(name, path, why):
    where = "".join(f"[{k!r}]" for k in path)
    return _errors.InvalidArgument(
        f"entry {name!r}{': ' + where if where else ''}: {why}")


class _Damaged(Exception):
    """What is wrong with a tree description; unflatten makes it DataLoss."""


def unflatten(tree, values, omitted=frozenset(), checkpoint="the checkpoint"):
    """Rebuilds the state that `flatten` described with `tree` (its JSON
    text, or the parsed object).

    Entries named in `omitted` (rank-local ones saved at another world size)
    are left out of their dicts, and are None in their lists and tuples. A
    tree that is not exactly what flatten writes, or that does not account
    for every entry, raises ckpt.DataLoss naming `checkpoint` (e.g. "step 7
    in file:///data/run"); a newer version of it, ckpt.FailedPrecondition.
    """
    try:
        if isinstance(tree, (str, bytes)):
            tree = json.loads(tree)
        if not isinstance(tree, dict):
            raise _Damaged(f"it is a {_kind(tree)}, not an object")
        version = tree.get("version")
        if not _is_int(version):
            raise _Damaged(f"its version is {_brief(version)}, not an int")
        if version == TREE_VERSION:
            if set(tree) != {"version", "root"}:
                raise _Damaged(f"its keys are {_brief(sorted(tree))}, not "
                               f"['root', 'version']")
            root = tree["root"]
            if not isinstance(root, dict) or set(root) != {"dict"}:
                raise _Damaged(f"its root is {_brief(root)}, not a dict node")
            used = set()
            state = _build(root, values, omitted, used)
            unnamed = sorted(set(values) - used)
            if unnamed:
                raise _Damaged(f"it leaves out the entry {unnamed[0]!r} "
                               f"({len(unnamed)} in all)")
            return state
    except _Damaged as e:
        why = str(e)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError,
            RecursionError) as e:
        why = f"{type(e).__name__}: {e}"
    else:
        raise _errors.FailedPrecondition(
            f"{checkpoint}: its {TREE_ENTRY} has version {version!r}; this "
            f"ckpt reads version {TREE_VERSION}")
    raise _errors.DataLoss(
        f"{checkpoint}: its {TREE_ENTRY} entry (how the state's containers "
        f"nest) is damaged: {why}") from None


_OMITTED = object()


def _build(node, values, omitted, used):
    if isinstance(node, str):
        if node in used:
            raise _Damaged(f"it names the entry {node!r} twice")
        used.add(node)
        if node in values:
            return values[node]
        if node in omitted:
            return _OMITTED
        raise _Damaged(f"it names the entry {node!r}, which the checkpoint "
                       f"lacks")
    if not isinstance(node, dict) or len(node) != 1:
        raise _Damaged(f"it holds the node {_brief(node)}, which is neither "
                       f"an entry's name nor one container")
    [(kind, children)] = node.items()
    if kind not in ("dict", "list", "tuple") or not isinstance(children,
                                                               list):
        raise _Damaged(f"it holds the unknown node {_brief(node)}")
    if kind != "dict":
        built = [_present(_build(child, values, omitted, used))
                 for child in children]
        return built if kind == "list" else tuple(built)
    out, keys = {}, set()
    for item in children:
        if not (isinstance(item, list) and len(item) == 2):
            raise _Damaged(f"a dict node holds {_brief(item)}, not a "
                           f"[key, node] pair")
        key, child = item
        if not (isinstance(key, str) or _is_int(key)):
            raise _Damaged(f"a dict node has the key {_brief(key)}, not a "
                           f"str or int")
        if key in keys:
            raise _Damaged(f"a dict node has the key {key!r} twice")
        keys.add(key)
        value = _build(child, values, omitted, used)
        if value is not _OMITTED:
            out[key] = value
    return out


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value):
    return {dict: "object", list: "array", str: "string", bool: "boolean",
            type(None): "null"}.get(type(value), "number")


def _brief(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _present(value):
    return None if value is _OMITTED else value


def unflatten_dotted(values):
    """Nested dicts from dotted names (a checkpoint that C++ wrote).

    When one name is a prefix of another ("a" and "a.b"), no nesting can hold
    both: the names are returned flat, with a warning.
    """
    root = {}
    for name, value in values.items():
        parts = name.split(".")
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict) or isinstance(node, Metadata):
                break
        else:
            if parts[-1] not in node:
                node[parts[-1]] = value
                continue
        warnings.warn(
            f"entry {name!r} clashes with another entry's dotted path; "
            f"returning the checkpoint's entries under their flat names",
            stacklevel=3)
        return dict(values)
    return root


def assign(root, path, value):
    """Sets the leaf at `path` in `root` to `value`, rebuilding tuples."""
    _set_in(root, path, value)


def _set_in(container, keys, value):
    key = keys[0]
    new = value if len(keys) == 1 else _set_in(container[key], keys[1:], value)
    if isinstance(container, tuple):
        items = list(container)
        items[key] = new
        if hasattr(container, "_fields"):  # a namedtuple
            return type(container)(*items)
        return type(container)(items)
    container[key] = new
    return container


def _show(path):
    return "state" + "".join(f"[{k!r}]" for k in path)
