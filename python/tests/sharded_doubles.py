"""Test doubles of PyTorch's DTensor and ShardedTensor.

PyTorch 1.13 has no DTensor, and under Python 3.11 it cannot import
ShardedTensor (a dataclass of its own is refused at import), so these
tests hand ckpt.torch objects with the same interface instead, on any
PyTorch (test_fsdp2.py runs the real ones on PyTorch 2): what
ckpt.torch reads of them (a DTensor's shape, device_mesh, placements and
local tensor; a ShardedTensor's size() and local_shards()) behaves as in
PyTorch 2. Each rank's local piece is cut here with torch.chunk, which is
how DTensor's Shard(d) splits a dimension (chunks of ceil(n / k), the last
ones short or missing), independently of ckpt's own box arithmetic.
"""

import types

import torch


class Shard:
    """DTensor's Shard(dim) placement."""

    def __init__(self, dim):
        self.dim = dim

    def is_shard(self, dim=None):
        return dim is None or dim == self.dim

    def is_replicate(self):
        return False

    def is_partial(self):
        return False

    def __repr__(self):
        return f"Shard(dim={self.dim})"


class Replicate:
    def is_shard(self, dim=None):
        return False

    def is_replicate(self):
        return True

    def is_partial(self):
        return False

    def __repr__(self):
        return "Replicate()"


class Partial(Replicate):
    def is_replicate(self):
        return False

    def is_partial(self):
        return True

    def __repr__(self):
        return "Partial(sum)"


class DeviceMesh:
    """A mesh of `shape` over ranks 0..prod(shape)-1 in row-major order,
    seen from `rank`."""

    def __init__(self, shape, rank):
        self.shape, self.rank = tuple(shape), rank

    def size(self, mesh_dim=None):
        if mesh_dim is None:
            return int(torch.tensor(self.shape).prod())
        return self.shape[mesh_dim]

    def get_coordinate(self):
        if self.rank >= self.size():
            return None
        coordinate, rest = [], self.rank
        for n in reversed(self.shape):
            coordinate.append(rest % n)
            rest //= n
        return list(reversed(coordinate))


class DTensor:
    """The part of a DTensor ckpt.torch reads."""

    def __init__(self, local, global_shape, mesh, placements):
        self._local_tensor = local
        self.shape = torch.Size(global_shape)
        self.device_mesh = mesh
        self.placements = tuple(placements)

    def to_local(self):
        return self._local_tensor


def distribute(whole, mesh, placements):
    """A DTensor double holding this rank's part of `whole` (a clone)."""
    local = whole
    coordinate = mesh.get_coordinate()
    for mesh_dim, p in enumerate(placements):
        if not p.is_shard():
            continue
        chunks = torch.chunk(local, mesh.size(mesh_dim), dim=p.dim)
        i = coordinate[mesh_dim]
        if i < len(chunks):
            local = chunks[i]
        else:
            shape = list(local.shape)
            shape[p.dim] = 0
            local = local.new_empty(shape)
    return DTensor(local.clone(), whole.shape, mesh, placements)


class ShardedTensor:
    """The part of an FSDP1 ShardedTensor ckpt.torch reads."""

    def __init__(self, shards, global_shape):
        self._shards, self._size = shards, torch.Size(global_shape)

    def local_shards(self):
        return self._shards

    def size(self):
        return self._size


def chunk_rows(whole, rank, world):
    """A ShardedTensor double of `whole` split by rows as
    ChunkShardingSpec(dim=0) splits it: this rank's rows, or none."""
    chunks = torch.chunk(whole, world, dim=0)
    if rank >= len(chunks):
        return ShardedTensor([], whole.shape)
    step = chunks[0].shape[0]
    meta = types.SimpleNamespace(shard_offsets=[rank * step, 0],
                                 shard_sizes=list(chunks[rank].shape))
    shard = types.SimpleNamespace(tensor=chunks[rank].clone(), metadata=meta)
    return ShardedTensor([shard], whole.shape)
