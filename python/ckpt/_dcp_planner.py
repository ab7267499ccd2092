"""DCP's planner_data in a ckpt step: how each flat name that DCP's
planner made ("model.layer.w", "optim.param_groups.0.lr") maps to the
nested keys of the state it flattened (("model", "layer", "w"),
("optim", "param_groups", 0, "lr")).

DCP keeps that mapping in its Metadata.planner_data, and some of its load
paths read it back from the storage rather than from the caller's state:
_EmptyStateDictLoadPlanner (a load into an empty dict, as
format_utils.dcp_to_torch_save does; with `keys=` it indexes the mapping
for every name) and load_sharded_optimizer_state_dict. The names alone
cannot say it: a dot may be inside a key, and an int key makes a list. So
ckpt.torch.StorageWriter records the mapping of the saving planner as the
metadata entry DCP_PLANNER_ENTRY (JSON, read from the manifest with no
data read), `ckpt import-dcp` records the one of DCP's .metadata, and
ckpt.torch.StorageReader hands it to DCP. A step without it (saved before
ckpt recorded it, or by ckpt.torch.save) is described by its names split
at their dots, as ckpt.open(root).load() nests them.
"""

import json

from ckpt import _tree

ENTRY = _tree.DCP_PLANNER_ENTRY


def _key_path(keys):
    """A mapping's key path as JSON can hold it exactly (str and int
    keys), or None."""
    if not isinstance(keys, (tuple, list)) or not keys:
        return None
    if not all(isinstance(k, (str, int)) and not isinstance(k, bool)
               for k in keys):
        return None
    return list(keys)


def recorded(mapping, names=None):
    """The JSON text of DCP's `mapping` (name -> key path) for the names
    in `names` (None: all), or None when there is nothing to record. A
    key path of other keys than str and int is left out: its name is
    described flat."""
    if not isinstance(mapping, dict):
        return None
    out = {}
    for name, keys in mapping.items():
        path = _key_path(keys)
        if isinstance(name, str) and path is not None and \
                (names is None or name in names):
            out[name] = path
    return json.dumps(out, sort_keys=True) if out else None


def entry(mapping, names=None):
    """The library's metadata entry recording `mapping`, or None."""
    text = recorded(mapping, names)
    if text is None:
        return None
    return (ENTRY, "metadata", text, None, None)


def saved_entries(rank, plan, planner):
    """[the entry recording DCP's planner_data] of a StorageWriter's save:
    from the coordinator (rank 0), whose planner flattened the whole state
    as every rank's did; none elsewhere, nor where the planner kept no
    mapping (flatten_state_dict=False)."""
    if rank != 0:
        return []
    mapping = getattr(plan, "planner_data", None)
    if not isinstance(mapping, dict):
        mapping = getattr(planner, "mappings", None)
    recorded_entry = entry(mapping)
    return [] if recorded_entry is None else [recorded_entry]


def _split_at_dots(names):
    """{name: key path} splitting each name at its dots, as
    ckpt.open(root).load() nests a root without a recorded mapping; a name
    that would land inside another's value (names "a" and "a.b") stays
    whole."""
    paths = {n: tuple(n.split(".")) for n in names}
    prefixes = {p[:i] for p in paths.values() for i in range(1, len(p))}
    whole = set(paths.values())
    return {n: (p if p not in prefixes and not any(
        p[:i] in whole for i in range(1, len(p))) else (n,))
        for n, p in paths.items()}


def planner_data(desc, names):
    """DCP's planner_data for the names `names` of the step `desc`
    describes: the recorded mapping where the step has one (a name it
    lacks stays flat), else each name split at its dots."""
    recorded_paths = {}
    for e in desc.entries:
        if e.name == ENTRY and e.kind == "metadata" and e.owner == -1:
            try:
                loaded = json.loads(e.json)
            except ValueError:
                loaded = None
            if isinstance(loaded, dict):
                recorded_paths = loaded
            break
    if not recorded_paths:
        return _split_at_dots(names)
    # A name the mapping lacks is flat, as DCP leaves one its planner_data
    # lacks.
    out = {}
    for name in names:
        path = _key_path(recorded_paths.get(name))
        out[name] = (name,) if path is None else tuple(path)
    return out
