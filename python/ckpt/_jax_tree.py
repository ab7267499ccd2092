"""JAX pytrees <-> the states ckpt.CheckpointManager saves (ckpt.jax).

Entry names. Each leaf's path, as jax.tree_util.tree_flatten_with_path
gives it, joined with dots: a dict key is itself (str or int), a list or
tuple index its number, a namedtuple's or dataclass's field its name, a
custom node's child its flattened index. {"params": {"w": w}, "opt": (mu,
nu)} holds "params.w", "opt.0" and "opt.1"; an optax ScaleByAdamState in
a tuple, "opt.0.mu". A None leaf is an entry too (a metadata entry that
restores None), so a target with None where the state had None matches.

The state handed to ckpt.CheckpointManager mirrors the pytree with plain
containers: dicts stay dicts, lists lists, tuples tuples, and every other
node (a namedtuple, a dataclass, a registered class) becomes a dict of its
children by key. ckpt's own tree entry records it, so that a restore
without a target rebuilds those containers.

Leaves: a jax.Array is gathered to one host array, each distinct shard
copied once (the replicas of a shard, which share its index, are skipped),
so a replicated or sharded array is one whole tensor in the checkpoint;
NumPy arrays and Python scalars are saved as ckpt saves them. A typed
PRNG key (jax.random.key) is saved as its data (jax.random.key_data); a
restore onto a target that holds a key (or its jax.ShapeDtypeStruct) makes
the key again, one without a target gives the data.
"""

import jax
import numpy as np

from ckpt import _errors, _values

# Checkpoint dtype -> the NumPy dtype a restored array has (JAX's ml_dtypes
# where NumPy has none).
_NUMPY_OF = {"BOOL": np.dtype(bool), "U8": np.dtype("u1"),
             "I8": np.dtype("i1"), "U16": np.dtype("u2"),
             "I16": np.dtype("i2"), "F16": np.dtype("f2"),
             "U32": np.dtype("u4"), "I32": np.dtype("i4"),
             "F32": np.dtype("f4"), "U64": np.dtype("u8"),
             "I64": np.dtype("i8"), "F64": np.dtype("f8"),
             "BF16": np.dtype(jax.numpy.bfloat16),
             "F8_E4M3": np.dtype(jax.numpy.float8_e4m3fn),
             "F8_E5M2": np.dtype(jax.numpy.float8_e5m2)}
_STORED_OF = {v: k for k, v in _NUMPY_OF.items()}


def is_key(dtype):
    """Whether `dtype` is a typed PRNG key's (jax.random.key)."""
    if dtype is None:
        return False
    try:
        return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    except TypeError:  # not a dtype at all
        return False


def key_data_of(leaf):
    """The shape and dtype of the data of the typed key (array or
    jax.ShapeDtypeStruct) `leaf`: its shape and the impl's trailing ones."""
    return jax.eval_shape(jax.random.key_data,
                          jax.ShapeDtypeStruct(leaf.shape, leaf.dtype))


def stored_dtype(dtype):
    """The checkpoint dtype of a NumPy or JAX dtype, or None."""
    return _STORED_OF.get(np.dtype(dtype))


def _aligned_empty(shape, dtype):
    """np.empty(shape, dtype) starting on a 64-byte boundary (a page for a
    MiB or more): JAX's CPU backend then takes the array as a device buffer
    without copying it (jax.device_put, make_array_from_callback), where
    NumPy's own 16-byte alignment costs a second copy of every restored
    byte into fresh memory."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * dtype.itemsize
    align = 4096 if nbytes >= (1 << 20) else 64
    block = np.empty(nbytes + align, np.uint8)
    start = (-block.ctypes.data) % align
    return block[start:start + nbytes].view(dtype).reshape(shape)


def raw_array(dtype, shape):
    """A fresh host array to read entry bytes of checkpoint dtype `dtype`
    into: unsigned integers as wide for the ml_dtypes, whose bits the
    library fills (view() then gives the typed array); aligned so that JAX
    on the CPU uses it in place."""
    width = _values._RAW_DTYPES.get(dtype)
    if width is not None:
        return _aligned_empty(shape, np.dtype(f"u{width}"))
    return _aligned_empty(shape, _NUMPY_OF[dtype])


def typed(array, dtype):
    """A raw_array after the read, as the NumPy dtype of `dtype`."""
    return array.view(_NUMPY_OF[dtype])


def key_part(key):
    """One element of a jax key path as a name part (str or int)."""
    for attr in ("key", "idx", "name"):  # DictKey, SequenceKey, GetAttrKey
        if hasattr(key, attr):
            return getattr(key, attr)
    return str(key)


def entry_name(path):
    return ".".join(str(key_part(k)) for k in path)


def named_leaves(tree):
    """([(entry name, leaf)], treedef) of a pytree, None leaves included."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(
        tree, is_leaf=lambda x: x is None)
    return [(entry_name(path), leaf) for path, leaf in flat], treedef


def _is_node(value):
    """Whether jax flattens `value` into children (a container) rather
    than keeping it as a leaf."""
    treedef = jax.tree_util.tree_structure(value)
    return not (treedef.num_leaves == 1 and treedef.num_nodes == 1)


def plain(tree, leaf, path=()):
    """`tree` with plain containers (see the module's docstring) and every
    leaf replaced by leaf(name, value)."""
    if tree is None:
        return None
    if type(tree) is dict:
        return {k: plain(v, leaf, path + (k,)) for k, v in tree.items()}
    if type(tree) in (list, tuple):
        items = [plain(v, leaf, path + (i,)) for i, v in enumerate(tree)]
        return items if type(tree) is list else tuple(items)
    if not _is_node(tree):
        return leaf(".".join(map(str, path)), tree)
    children, _ = jax.tree_util.tree_flatten_with_path(
        tree, is_leaf=lambda x: x is not tree)
    out = {}
    for child_path, child in children:
        k = key_part(child_path[0])
        out[k] = plain(child, leaf, path + (k,))
    return out


def host_array(name, array):
    """A jax.Array as one C-contiguous host array: each distinct shard
    (by index) copied once into it, or, for an array of one distinct shard
    in host memory (the CPU backend), that memory itself, read-only: the
    NumPy view keeps the buffer alive after the jax.Array is deleted, and
    JAX donates no buffer that a view holds, so the view stays what was
    saved."""
    if not array.is_fully_addressable:
        raise _errors.InvalidArgument(
            f"entry {name!r}: the jax.Array spans processes (not fully "
            f"addressable); ckpt.jax saves arrays of one process")
    try:
        return _gathered(array)
    except RuntimeError as e:  # a deleted or donated array, a device error
        raise _errors.InvalidArgument(
            f"entry {name!r}: cannot copy the jax.Array to the host "
            f"({e})") from None


def _gathered(array):
    distinct, seen = [], set()
    for shard in array.addressable_shards:
        key = _index_key(shard.index, array.shape)
        if key not in seen:
            seen.add(key)
            distinct.append(shard)
    if len(distinct) == 1:
        return np.asarray(distinct[0].data)
    # Every transfer starts before the first is waited for: on an
    # accelerator they overlap.
    for shard in distinct:
        shard.data.copy_to_host_async()
    out = np.empty(array.shape, np.dtype(array.dtype))
    for shard in distinct:
        out[shard.index] = np.asarray(shard.data)
    return out


def _index_key(index, shape):
    """A shard's index (a tuple of slices) as hashable (start, stop)
    pairs."""
    return tuple(s.indices(n)[:2] for s, n in zip(index, shape))


def saved_leaf(copy):
    """The leaf function of plain() for a save: jax.Arrays to host arrays
    (immutable: never copied again), NumPy arrays copied when `copy` (for
    a save that outlives the call, as the caller may change them), other
    values as they are."""
    def leaf(name, value):
        if isinstance(value, jax.Array):
            if is_key(value.dtype):
                # A typed PRNG key (jax.random.key): its data, which a
                # restore onto a target holding a key wraps again.
                value = jax.random.key_data(value)
            return host_array(name, value)
        if copy and isinstance(value, np.ndarray):
            return np.array(value, copy=True)
        return value
    return leaf

