"""Restoring a ckpt.jax checkpoint: one step read into host memory, then
placed on devices as the target's shardings say.

1. The step's description is checked against the target before any byte
   is read: every entry the target names must be in the checkpoint (else
   ckpt.NotFound), the checkpoint must hold nothing the target lacks, and
   each array's shape and dtype must be the stored ones (else
   ckpt.InvalidArgument), each error naming the entry (with
   jax_enable_x64 off, a 64-bit entry matches the 32-bit dtype that JAX,
   jax.eval_shape, narrows it to: it is restored as saved); where the names
   agree, the containers must be the saved ones too (a dict, a list, a
   tuple, each dict's keys), as the step's tree entry records them.
2. Every tensor is read, in one load of the library, into new host
   memory of its own (bfloat16 and float8 as unsigned integers as wide,
   then viewed as JAX's dtypes): each stored chunk is read and checked
   once, however many devices hold a copy of the array.
3. Each target leaf with a sharding becomes a jax.Array through
   jax.make_array_from_callback: each device receives its box, cut from
   the host array; replicas are cut from the same memory. The host arrays
   are aligned (_jax_tree.raw_array), so on the CPU a box that is a whole
   array is used in place, not copied.

The target is only read, never changed: a failure at any step leaves the
caller's arrays as they were.
"""

import jax
import numpy as np

from ckpt import _errors, _jax_tree, _tree, _values


def restore_step(mgr, step, target):
    """The pytree of checkpoint `step` (a committed step number) of the
    ckpt.CheckpointManager `mgr`, shaped as `target` (None: as saved)."""
    desc = mgr.describe(step, internal=True)
    where = f"restore step {desc.info.step} of {mgr.url}"
    stored = {e.name: e for e in desc.entries if e.owner == -1}
    # Rank-local entries (another job's ckpt.RankLocal values): left out.
    omitted = {e.name for e in desc.entries if e.owner != -1}
    tree = stored.pop(_tree.TREE_ENTRY, None)
    stored.pop(_tree.DCP_PLANNER_ENTRY, None)  # DCP's, not a leaf
    if target is None:
        wanted = {name: None for name in stored}
    else:
        leaves, treedef = _jax_tree.named_leaves(target)
        wanted = dict(leaves)
        _check(where, stored, wanted)
        if tree is not None and tree.kind == "metadata":
            _check_structure(where, tree, stored, omitted, target)
    values = _read(mgr, desc, stored, wanted, where)
    if target is not None:
        return treedef.unflatten(
            [_placed(_as_target_scalar(values[name], leaf, name, where), leaf)
             for name, leaf in leaves])
    values = {name: _placed(v, None) for name, v in values.items()}
    if tree is None or tree.kind != "metadata":  # saved from C++
        return _tree.unflatten_dotted(values)
    return _tree.unflatten(tree.json, values, omitted, where)


def _check(where, stored, wanted):
    missing = [n for n in wanted if n not in stored]
    if missing:
        raise _errors.NotFound(
            f"{where}: the checkpoint has no entry {missing[0]!r} of the "
            f"target ({len(missing)} missing: a different model?); nothing "
            f"was restored")
    extra = [n for n in stored if n not in wanted]
    if extra:
        raise _errors.InvalidArgument(
            f"{where}: the checkpoint holds entry {extra[0]!r}, which the "
            f"target lacks ({len(extra)} such: a different model?); nothing "
            f"was restored")
    for name, leaf in wanted.items():
        e = stored[name]
        if leaf is None:
            if e.kind != "metadata":
                raise _errors.InvalidArgument(
                    f"{where}: entry {name!r} is None in the target, a "
                    f"{e.kind} in the checkpoint; nothing was restored")
            continue
        shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype",
                                                             None)
        if shape is None or dtype is None:
            continue  # a scalar or other value: restored as saved
        if e.kind == "metadata" and tuple(shape) == ():
            continue  # a Python scalar saved (jax.eval_shape's 0-d leaf)
        if _jax_tree.is_key(dtype):  # a typed PRNG key: saved as its data
            data = _jax_tree.key_data_of(leaf)
            shape, dtype = data.shape, data.dtype
        mine = _jax_tree.stored_dtype(dtype)
        if e.kind == "tensor" and mine != e.dtype and \
                _narrowed_target(e.dtype, dtype, leaf):
            mine = e.dtype  # restored as the NumPy array saved (_placed)
        if mine is None:
            raise _errors.InvalidArgument(
                f"{where}: entry {name!r}: the target's dtype {dtype} has no "
                f"checkpoint dtype (ckpt stores bool, int8..int64, "
                f"uint8..uint64, float16, bfloat16, float32, float64, "
                f"float8_e4m3fn, float8_e5m2)")
        if e.kind != "tensor" or e.dtype != mine or \
                list(e.shape) != [int(d) for d in shape]:
            held = (f"a {e.dtype} tensor of shape {list(e.shape)}"
                    if e.kind == "tensor" else f"a {e.kind} entry")
            raise _errors.InvalidArgument(
                f"{where}: entry {name!r}: the target is a {mine} array of "
                f"shape {[int(d) for d in shape]}, the checkpoint holds "
                f"{held}; nothing was restored")
        sharding = getattr(leaf, "sharding", None)
        if sharding is not None:
            try:
                sharding.shard_shape(tuple(int(d) for d in shape))
            except Exception as error:  # noqa: BLE001 - JAX's says why
                raise _errors.InvalidArgument(
                    f"{where}: entry {name!r}: the target's sharding cannot "
                    f"hold its shape {[int(d) for d in shape]} "
                    f"({type(error).__name__}: {error}); nothing was "
                    f"restored") from None
            try:
                sharding.device_set
            except Exception:  # noqa: BLE001 - an AbstractMesh's, above all
                raise _errors.InvalidArgument(
                    f"{where}: entry {name!r}: the target's sharding "
                    f"({sharding}) names no devices to place the array on "
                    f"(an AbstractMesh, as jax.eval_shape of sharded arrays "
                    f"gives): give one on a concrete Mesh, e.g. "
                    f"jax.ShapeDtypeStruct(shape, dtype, sharding="
                    f"NamedSharding(mesh, spec)); nothing was restored") \
                    from None


class _Leaf:
    """A leaf of the saved structure or the target's, as compared."""


_LEAF = _Leaf()


def _check_structure(where, tree, stored, omitted, target):
    """Refuses a target whose containers are not the saved ones, though
    its entry names are: {"d": {0: a, 1: b}} saved and {"d": [a, b]} asked
    for both name "d.0" and "d.1". Both sides as a save records them (a
    namedtuple or other node as a dict of its children); dict keys in any
    order, as jax.eval_shape sorts them."""
    saved = _tree.unflatten(tree.json, dict.fromkeys(stored, _LEAF),
                            omitted, where)
    mine = _jax_tree.plain(target, lambda name, value: _LEAF)
    _same_containers(where, saved, mine, ())


def _container(value):
    kind = type(value)
    return kind.__name__ if kind in (dict, list, tuple) else None


def _shown(value):
    kind = _container(value)
    if kind is None:
        return "a leaf"
    if kind == "dict":
        keys = sorted(value, key=repr)
        return f"a dict with the keys {keys!r}" if keys else "an empty dict"
    return f"a {kind} of {len(value)}" if value else f"an empty {kind}"


def _same_containers(where, saved, mine, path):
    kind = _container(saved)
    same = kind == _container(mine)
    if same and kind == "dict":
        # By type too: {0: a} and {"0": a} both name "d.0".
        same = {(type(k), k) for k in saved} == {(type(k), k) for k in mine}
    elif same and kind is not None:
        same = len(saved) == len(mine)
    if not same:
        at = (f"entry {'.'.join(map(str, path))!r}" if path
              else "the top of the pytree")
        raise _errors.InvalidArgument(
            f"{where}: {at}: the checkpoint holds {_shown(saved)}, the "
            f"target {_shown(mine)}, though their entry names agree; "
            f"nothing was restored")
    if kind == "dict":
        for k in saved:
            _same_containers(where, saved[k], mine[k], path + (k,))
    elif kind is not None:
        for i, (a, b) in enumerate(zip(saved, mine)):
            _same_containers(where, a, b, path + (i,))


def _read(mgr, desc, stored, wanted, where):
    """{name: host value} of the entries in `wanted`: tensors as NumPy
    arrays of their JAX dtype, blobs as bytes, metadata decoded."""
    state, out = {}, {}
    for name in wanted:
        e = stored[name]
        if e.kind == "tensor":
            state[name] = _jax_tree.raw_array(e.dtype, list(e.shape))
        elif e.kind == "blob":
            state[name] = b""
        else:
            out[name] = _values.decode_metadata(e.json, name, where)
    if state:
        fresh = frozenset(id(v) for v in state.values()
                          if isinstance(v, np.ndarray))
        # New memory of ours: filled directly, with nothing to put back.
        mgr._stage_into(state, desc, False, True, fresh).commit()
    for name, value in state.items():
        e = stored[name]
        out[name] = (_jax_tree.typed(value, e.dtype) if e.kind == "tensor"
                     else value)
    return out


def _as_target_scalar(value, leaf, name, where):
    """A Python scalar saved where the target has a 0-d array: the scalar
    itself when the leaf is weak-typed (what jax.eval_shape makes of a
    state's `"step": 0` or `"lr": 0.001`); for any other 0-d leaf, that
    array, if the value fits its dtype exactly; anything else as it is."""
    dtype = getattr(leaf, "dtype", None)
    if dtype is None or not isinstance(value, (bool, int, float)) or \
            tuple(getattr(leaf, "shape", ())) != ():
        return value
    if getattr(leaf, "weak_type", False):
        # A weak type says only that a Python scalar stood here, not that
        # the state wants an array of that dtype: the saved value is exact,
        # and casting it (0.001 to float32) would change it.
        return value
    try:
        # A float beyond the dtype's range becomes inf, which the check
        # below refuses; NumPy's own overflow warning would only repeat it.
        with np.errstate(over="ignore", invalid="ignore"):
            converted = np.asarray(value, dtype=np.dtype(dtype))
    except OverflowError:
        converted = None
    if converted is None or converted.item() != value or \
            type(value) is float and converted.dtype.kind != "f":
        raise _errors.InvalidArgument(
            f"{where}: entry {name!r}: the checkpoint holds the Python "
            f"value {value!r}, which the target's {np.dtype(dtype)} cannot "
            f"hold exactly; nothing was restored")
    return converted


def _narrowed_target(stored, dtype, leaf):
    """Whether a target leaf of `dtype` stands for a 64-bit entry of
    checkpoint dtype `stored` that JAX narrowed (jax_enable_x64 off):
    jax.eval_shape makes an int32 leaf of a state's np.int64 array, a
    float32 leaf of its np.float64. A NumPy target asks for its own dtype."""
    if jax.config.jax_enable_x64 or isinstance(leaf, (np.ndarray,
                                                      np.generic)):
        return False
    wide = _jax_tree._NUMPY_OF.get(stored)
    return wide is not None and wide.itemsize == 8 and \
        wide.kind in "iuf" and \
        jax.dtypes.canonicalize_dtype(wide) == np.dtype(dtype)


def _narrowed(value):
    """Whether JAX would narrow `value` (a 64-bit array while
    jax_enable_x64 is off)."""
    return (value.dtype.itemsize == 8 and value.dtype.kind in "iuf"
            and not jax.config.jax_enable_x64)


def _placed(value, leaf):
    """A restored host value as the target leaf `leaf` wants it: on the
    devices of its sharding (a jax.Array or jax.ShapeDtypeStruct), a NumPy
    array (or scalar) for a NumPy target, else (no target, or a scalar's)
    tensors as jax.Arrays on the default device and other values as they
    are. A 64-bit array that JAX would narrow stays a NumPy array."""
    if not isinstance(value, np.ndarray):
        return value
    if isinstance(leaf, np.ndarray):
        return value
    if isinstance(leaf, np.generic):
        return value[()]
    if leaf is not None and _jax_tree.is_key(getattr(leaf, "dtype", None)):
        key = jax.random.wrap_key_data(value, impl=leaf.dtype._impl)
        sharding = getattr(leaf, "sharding", None)
        return key if sharding is None else jax.device_put(key, sharding)
    if _narrowed(value):
        # JAX would cut it to 32 bits (jax_enable_x64 off), values and all:
        # kept exact, a NumPy array, whatever the target says (a
        # ShapeDtypeStruct may name a 64-bit dtype; no jax.Array holds one).
        return value
    sharding = getattr(leaf, "sharding", None)
    if sharding is None:
        return jax.device_put(value)
    return jax.make_array_from_callback(
        value.shape, sharding, lambda index: np.asarray(value[index]))
