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
"""

import warnings
from collections.abc import Mapping

from ckpt import _ckpt

TREE_ENTRY = "__python_tree__"
TREE_VERSION = 1


class Metadata(dict):
    """A dict saved as one metadata entry (a JSON object), not flattened.

    Metadata entries that C++ wrote with State::AddMetadata load as Metadata;
    saving one back writes the same JSON object. Its values must be
    JSON-serializable.
    """


def _is_container(value):
    return (isinstance(value, (Mapping, list, tuple))
            and not isinstance(value, Metadata))


# The walks below are module-level functions, not nested closures: a closure
# that calls itself is a reference cycle, which would keep every array it has
# seen alive until the cycle collector happens to run.


def flatten(state):
    """Returns ([(name, path, leaf)], tree) for a state dict.

    `path` is the tuple of keys and indices that leads to the leaf; `tree` is
    the JSON-able description that `unflatten` rebuilds the containers from.
    """
    if not isinstance(state, Mapping) or isinstance(state, Metadata):
        raise _ckpt.InvalidArgument(
            f"a state must be a dict, not {type(state).__name__}")
    leaves = []
    root = _flatten(state, (), leaves, {})
    return leaves, {"version": TREE_VERSION, "root": root}


def _flatten(value, path, leaves, seen):
    if isinstance(value, Mapping) and not isinstance(value, Metadata):
        items = []
        for key, child in value.items():
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                raise _ckpt.InvalidArgument(
                    f"key {key!r} at {_show(path)}: keys must be str or int")
            items.append([key, _flatten(child, path + (key,), leaves, seen)])
        return {"dict": items}
    if isinstance(value, (list, tuple)):
        kind = "tuple" if isinstance(value, tuple) else "list"
        return {kind: [_flatten(child, path + (i,), leaves, seen)
                       for i, child in enumerate(value)]}
    name = ".".join(str(k) for k in path)
    if name == TREE_ENTRY:
        raise _ckpt.InvalidArgument(
            f"entry name {TREE_ENTRY!r} is reserved by ckpt")
    if name in seen:
        raise _ckpt.InvalidArgument(
            f"{_show(seen[name])} and {_show(path)} both make the entry name "
            f"{name!r}")
    seen[name] = path
    leaves.append((name, path, value))
    return name


def unflatten(tree, values, omitted=frozenset()):
    """Rebuilds the state that `flatten` described with `tree`.

    Entries named in `omitted` (rank-local ones saved at another world size)
    are left out of their dicts, and are None in their lists and tuples.
    """
    if tree.get("version") != TREE_VERSION:
        raise _ckpt.FailedPrecondition(
            f"the checkpoint's {TREE_ENTRY} has version "
            f"{tree.get('version')!r}; this ckpt reads version {TREE_VERSION}")
    return _build(tree["root"], values, omitted)


_OMITTED = object()


def _build(node, values, omitted):
    if isinstance(node, str):
        if node in values:
            return values[node]
        if node in omitted:
            return _OMITTED
        raise _ckpt.DataLoss(
            f"{TREE_ENTRY} names the entry {node!r}, which the checkpoint "
            f"lacks")
    if "dict" in node:
        built = ((key, _build(child, values, omitted))
                 for key, child in node["dict"])
        return {key: v for key, v in built if v is not _OMITTED}
    if "list" in node:
        return [_present(_build(child, values, omitted))
                for child in node["list"]]
    if "tuple" in node:
        return tuple(_present(_build(child, values, omitted))
                     for child in node["tuple"])
    raise _ckpt.DataLoss(f"{TREE_ENTRY} holds an unknown node {node!r}")


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
