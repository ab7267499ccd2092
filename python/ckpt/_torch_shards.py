"""ckpt.torch's sharded leaves: a DTensor (FSDP2, tensor parallel) or a
ShardedTensor (FSDP1) as this rank's ckpt.Shard of the global tensor, its
box (offsets and lengths) as PyTorch cuts it."""

import math

import torch

from ckpt import _errors, _values

try:
    from torch.distributed.tensor import DTensor as _DTensor
except ImportError:
    try:
        from torch.distributed._tensor import DTensor as _DTensor
    except ImportError:
        _DTensor = None

HAS_DTENSOR = _DTensor is not None


def is_dtensor(value):
    if _DTensor is not None and isinstance(value, _DTensor):
        return True
    # By its interface too, so that a test double stands in for it.
    return all(hasattr(value, a)
               for a in ("placements", "device_mesh", "to_local"))


def is_sharded_tensor(value):
    # By its interface, so that a test double stands in for it: Debian's
    # PyTorch cannot import the class under Python 3.11.
    return (callable(getattr(value, "local_shards", None))
            and callable(getattr(value, "size", None)))


def show(path):
    return ".".join(str(k) for k in path) or "the state"


def _local_tensor(dtensor):
    local = getattr(dtensor, "_local_tensor", None)
    return local if local is not None else dtensor.to_local()


def dtensor_shard(dt, path):
    """A DTensor as this rank's ckpt.Shard of the global tensor (an empty
    box where this rank holds none of it)."""
    local = _local_tensor(dt)
    global_shape = [int(d) for d in dt.shape]
    offsets = _dtensor_offsets(dt, global_shape, list(local.shape), path)
    return _values.Shard(local, offsets, global_shape)


def _dtensor_offsets(dt, global_shape, local_shape, path):
    mesh, placements = dt.device_mesh, tuple(dt.placements)
    for p in placements:
        # PyTorch's box of a Partial is the whole tensor: each rank's local
        # value is only a part of the sum, and saving one would store a
        # value the job never had.
        if not (p.is_replicate() or p.is_shard()):
            raise _errors.InvalidArgument(
                f"entry {show(path)!r}: the DTensor placement {p} is not "
                f"one ckpt saves (Shard(d) and Replicate(); reduce a "
                f"Partial first, e.g. dt.redistribute(dt.device_mesh, "
                f"[Replicate()]))")
    computed = _torch_local_box(global_shape, mesh, placements)
    if computed is None:
        computed = _local_box(global_shape, mesh, placements, path)
    lengths, offsets = computed
    if math.prod(local_shape) == 0:
        return [0] * len(global_shape)
    if list(lengths) != local_shape:
        raise _errors.InvalidArgument(
            f"entry {show(path)!r}: the DTensor's local shard has shape "
            f"{local_shape}, but its placements {placements} give this rank "
            f"a box of {list(lengths)}")
    return offsets


def _torch_local_box(global_shape, mesh, placements):
    """PyTorch's own (lengths, offsets) of this rank's box, which knows
    every placement of the installed version; None where it is absent."""
    compute = None
    for module in ("torch.distributed.tensor._utils",
                   "torch.distributed._tensor._utils"):
        try:
            mod = __import__(module, fromlist=["_"])
        except ImportError:
            continue
        compute = getattr(mod, "compute_local_shape_and_global_offset", None)
        if compute is not None:
            break
    if compute is None or not hasattr(mesh, "mesh"):
        return None
    lengths, offsets = compute(torch.Size(global_shape), mesh, placements)
    if len(offsets) != len(global_shape):  # a rank outside the mesh
        return [0] * len(global_shape), [0] * len(global_shape)
    return [int(x) for x in lengths], [int(x) for x in offsets]


def _local_box(global_shape, mesh, placements, path):
    """(lengths, offsets) of this rank's box under `placements`, as DTensor
    cuts: on each mesh dimension in turn, Shard(d) splits what is left of
    dimension d into mesh-size chunks of ceil(n / size) elements (the last
    ones shorter or empty), and Replicate() keeps it whole."""
    coordinate = mesh.get_coordinate()
    ndim = len(global_shape)
    if coordinate is None:  # this rank is not in the mesh
        return [0] * ndim, [0] * ndim
    lengths, offsets = list(global_shape), [0] * ndim
    for mesh_dim, p in enumerate(placements):
        if p.is_replicate():
            continue
        if not p.is_shard() or type(p).__name__ != "Shard":
            raise _errors.InvalidArgument(
                f"entry {show(path)!r}: the DTensor placement {p} is not "
                f"one ckpt saves (Shard(d) and Replicate(); reduce a "
                f"Partial first)")
        d = p.dim + ndim if p.dim < 0 else p.dim
        n = mesh.size(mesh_dim)
        chunk = -(-lengths[d] // n)
        start = min(chunk * coordinate[mesh_dim], lengths[d])
        end = min(start + chunk, lengths[d])
        offsets[d] += start
        lengths[d] = end - start
    return lengths, offsets


def sharded_tensor_shard(st, path):
    """A ShardedTensor as this rank's ckpt.Shard of the global tensor."""
    shards = st.local_shards()
    global_shape = [int(d) for d in st.size()]
    if not shards:
        empty = torch.empty([0] * len(global_shape))
        return _values.Shard(empty, [0] * len(global_shape), global_shape)
    if len(shards) > 1:
        raise _errors.InvalidArgument(
            f"entry {show(path)!r}: this rank holds {len(shards)} shards of "
            f"the ShardedTensor; ckpt saves one box per rank (place one "
            f"shard on each rank)")
    shard = shards[0]
    offsets = [int(o) for o in shard.metadata.shard_offsets]
    sizes = [int(s) for s in shard.metadata.shard_sizes]
    if sizes != list(shard.tensor.shape):
        raise _errors.InvalidArgument(
            f"entry {show(path)!r}: the ShardedTensor's local shard has "
            f"shape {list(shard.tensor.shape)}, its metadata says {sizes}")
    return _values.Shard(shard.tensor, offsets, global_shape)


def shard_new_moments(optimizer, state, new_leaves):
    """A fresh optimizer's moments that a load makes (`new_leaves`, their
    id()s) for a parameter that is a DTensor (FSDP2, tensor parallel): a
    DTensor like the parameter (its mesh and placements, the stored
    dtype), so that each rank loads its own shard and the next step meets
    DTensors, as the optimizer's own first step would have made them. A
    plain tensor of the global shape there made that step fail ("mixed
    torch.Tensor and DTensor"). Others (a scalar step count) stay as made."""
    per_param = state.get("state") if isinstance(state, dict) else None
    if _DTensor is None or not isinstance(per_param, dict):
        return
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for index, moments in per_param.items():
        if (not isinstance(index, int) or not 0 <= index < len(params)
                or not isinstance(moments, dict)
                or not isinstance(params[index], _DTensor)):
            continue
        param = params[index]
        for key, value in list(moments.items()):
            if (id(value) not in new_leaves
                    or not isinstance(value, torch.Tensor)
                    or tuple(value.shape) != tuple(param.shape)):
                continue
            like = _local_tensor(param)
            local = torch.empty(like.shape, dtype=value.dtype,
                                device=like.device)
            moments[key] = _DTensor.from_local(
                local, param.device_mesh, param.placements, run_check=False,
                shape=param.shape, stride=param.stride())
            new_leaves.discard(id(value))
            new_leaves.add(id(local))
