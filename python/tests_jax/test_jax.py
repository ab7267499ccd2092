"""ckpt.jax on the real JAX: pytrees sharded over a CPU mesh of 8 devices
saved and restored onto other meshes, bit for bit.

ctest's jax_test runs this folder in its own pytest process with
XLA_FLAGS=--xla_force_host_platform_device_count=8 (python/CMakeLists.txt);
run by hand, the module sets the flag itself before JAX starts.
"""

import glob
import os
import subprocess
import sys
import tempfile
import warnings
from collections import namedtuple

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " +
                               _FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402 - after the flags it reads once
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import ckpt  # noqa: E402
import ckpt.jax as cj  # noqa: E402

Moments = namedtuple("Moments", "mu nu")


def mesh_of(shape, names):
    devices = np.array(jax.devices()[:int(np.prod(shape))]).reshape(shape)
    return jax.sharding.Mesh(devices, names)


def training_state():
    """A pytree on a (4, 2) mesh: sharded on both axes, on one axis and
    replicated on the other, replicated on all, bfloat16, int32, a 0-d
    array, NumPy arrays, Python scalars, bytes, a namedtuple, a tuple with
    None."""
    mesh = mesh_of((4, 2), ("data", "model"))

    def put(value, spec):
        return jax.device_put(value, NamedSharding(mesh, spec))

    rng = np.random.default_rng(7)
    kernel = rng.standard_normal((256, 128), dtype=np.float32)
    return {
        "params": {
            "kernel": put(kernel, P("data", "model")),
            "embed": put(rng.standard_normal((128, 64)).astype(np.float32),
                         P("data", None)),
            "bias": put(jnp.asarray(rng.standard_normal(128),
                                    jnp.bfloat16), P("model")),
            "norm": put(rng.standard_normal((64, 64)).astype(np.float32),
                        P()),
        },
        "opt": (Moments(put(np.full((256, 128), 0.5, np.float32),
                            P("data", "model")),
                        put(jnp.arange(128 * 8, dtype=jnp.int32)
                            .reshape(128, 8), P(None, "model"))), None),
        "step": put(jnp.int32(1234), P()),
        "rng": np.arange(4, dtype=np.uint32),
        "losses": [np.float64(0.25), 3],
        "name": "run-7",
        "seed": b"\x00\x07",
    }


def bits(value):
    """The bytes of an array, whatever its dtype (bfloat16 included)."""
    array = np.asarray(value)
    return array.dtype.name, array.shape, array.tobytes()


def arrays(tree):
    return [x for x in jax.tree_util.tree_leaves(tree)
            if isinstance(x, (jax.Array, np.ndarray, np.generic))]


def logical_bytes(tree):
    return sum(np.asarray(x).nbytes for x in arrays(tree))


def target_on(tree, mesh, spec_of):
    """`tree` as jax.ShapeDtypeStructs sharded over `mesh` by
    spec_of(array); other leaves as they are."""
    def abstract(x):
        if not isinstance(x, jax.Array):
            return x
        sharding = NamedSharding(mesh, spec_of(x))
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
    return jax.tree_util.tree_map(abstract, tree)


def read_bytes():
    """Bytes this process has read through read(2) and pread(2) so far
    (the library's reads of data objects among them)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "root")


def fs_type(path):
    """The file system type of the mount that holds `path`."""
    best, kind = "", ""
    with open("/proc/self/mounts") as f:
        for line in f:
            point, fs = line.split()[1:3]
            point = point.replace("\\040", " ")
            if (path == point or path.startswith(point.rstrip("/") + "/")) \
                    and len(point) > len(best):
                best, kind = point, fs
    return kind


@pytest.fixture
def disk_root(tmp_path):
    """A root whose objects the library reads with read(2) and pread(2),
    which /proc/self/io counts: not on tmpfs, whose objects it maps. The
    test's folder, else one under the working directory (ctest's: the
    build tree)."""
    for parent in (str(tmp_path), os.getcwd()):
        if fs_type(os.path.realpath(parent)) not in ("tmpfs", "ramfs"):
            # Removed even when the test fails.
            with tempfile.TemporaryDirectory(prefix="jax-test-",
                                             dir=parent) as folder:
                yield os.path.join(folder, "root")
            return
    pytest.fail(f"{tmp_path} and {os.getcwd()} are both on tmpfs, where the "
                f"library maps objects instead of reading them: no read to "
                f"count (run from a folder on disk)")


# Where each array of the state goes: (mesh, spec) of a target.
TARGETS = {
    # Each dimension split another way than it was saved.
    "mesh_2x4": lambda x: (mesh_of((2, 4), ("a", "b")),
                           P(*("b", "a")[:x.ndim])),
    # All 8 devices on the first dimension; the 0-d step replicated.
    "mesh_8": lambda x: (mesh_of((8,), ("all",)), P(*("all",)[:x.ndim])),
    "one_device": lambda x: (mesh_of((1,), ("one",)), P()),
}


@pytest.mark.parametrize("where", sorted(TARGETS))
def test_a_mesh_of_4x2_restores_onto_another_bit_for_bit(disk_root, where):
    state = training_state()
    place = TARGETS[where]
    target = jax.tree_util.tree_map(
        lambda x: x if not isinstance(x, jax.Array) else jax.ShapeDtypeStruct(
            x.shape, x.dtype, sharding=NamedSharding(*place(x))), state)
    with cj.CheckpointManager(disk_root, async_save=False) as mgr:
        assert mgr.save(10, state) is True
        before = read_bytes()
        restored = mgr.restore(10, target=target)
        read = read_bytes() - before

    assert jax.tree_util.tree_structure(restored) == \
        jax.tree_util.tree_structure(state)
    for path, got in jax.tree_util.tree_flatten_with_path(restored)[0]:
        want = _at(state, path)
        if not isinstance(want, jax.Array):
            assert type(got) is type(want), jax.tree_util.keystr(path)
            assert bits(got) == bits(want) if isinstance(
                want, (np.ndarray, np.generic)) else got == want
            continue
        assert bits(got) == bits(want), jax.tree_util.keystr(path)
        mesh, spec = place(want)
        assert got.sharding == NamedSharding(mesh, spec)
        # Each device holds exactly its box of the target's sharding.
        boxes = got.sharding.devices_indices_map(got.shape)
        assert len(got.addressable_shards) == mesh.size
        for shard in got.addressable_shards:
            assert shard.index == boxes[shard.device]
            assert bits(shard.data) == bits(np.asarray(want)[shard.index])
    # Each stored chunk is read once for the whole mesh, not once per
    # device that holds it: "norm" (16 KiB) is on every device, and each
    # row of "kernel" on two.
    logical = logical_bytes(state)
    assert logical <= read <= logical + 8 * 1024, (read, logical)


def _at(tree, path):
    for key in path:
        tree = (tree[key.key] if hasattr(key, "key") else
                tree[key.idx] if hasattr(key, "idx") else
                getattr(tree, key.name))
    return tree


def test_replicated_and_sharded_arrays_are_written_once(root):
    state = training_state()
    with cj.CheckpointManager(root, async_save=False) as mgr:
        mgr.save(1, state)
        info = mgr.manager.list()[-1]
        entries = {e.name: e for e in mgr.manager.describe(1).entries}
    logical = logical_bytes(state)
    # The state's arrays as their replicas on the devices hold them.
    held = sum(s.data.nbytes for x in arrays(state)
               if isinstance(x, jax.Array) for s in x.addressable_shards)
    slack = 16 * 1024
    assert held - logical > 8 * slack
    # The step stores each element once, plus its headers.
    assert logical <= info.bytes <= logical + slack, (info.bytes, logical)
    assert entries["params.norm"].num_pieces == 1
    assert entries["params.kernel"].shape == [256, 128]
    assert entries["params.bias"].dtype == "BF16"
    assert entries["opt.0.mu"].dtype == "F32"
    assert entries["opt.0.nu"].dtype == "I32"
    assert entries["opt.1"].kind == "metadata"
    # The core package reads it as NumPy arrays, global shapes.
    loaded = ckpt.open(root).load(1)
    np.testing.assert_array_equal(loaded["params"]["kernel"],
                                  np.asarray(state["params"]["kernel"]))


def test_restore_without_a_target_rebuilds_the_saved_containers(root):
    state = training_state()
    with cj.CheckpointManager(root, async_save=False) as mgr:
        mgr.save(3, state)
        restored = mgr.restore()
    kernel = restored["params"]["kernel"]
    assert isinstance(kernel, jax.Array)
    assert kernel.sharding.device_set == {jax.devices()[0]}
    assert bits(kernel) == bits(state["params"]["kernel"])
    assert restored["params"]["bias"].dtype == jnp.bfloat16
    assert bits(restored["params"]["bias"]) == bits(state["params"]["bias"])
    # A namedtuple comes back as a dict of its fields, a tuple a tuple.
    assert isinstance(restored["opt"], tuple) and restored["opt"][1] is None
    assert sorted(restored["opt"][0]) == ["mu", "nu"]
    assert restored["name"] == "run-7" and restored["losses"][1] == 3
    assert isinstance(restored["losses"], list)
    assert bits(restored["step"]) == bits(state["step"])


def test_64_bit_leaves_stay_exact_with_a_shape_dtype_target(root):
    # jax_enable_x64 off (the default): a jax.Array would cut these to 32
    # bits, values and all; they come back as NumPy arrays, as saved.
    assert not jax.config.jax_enable_x64
    state = {"pos": np.array([2**40 + 1], np.int64),
             "stat": np.array([1e300]),
             "u": np.array([2**64 - 1], np.uint64)}
    target = {k: jax.ShapeDtypeStruct(v.shape, v.dtype)
              for k, v in state.items()}
    # jax.eval_shape narrows them: int32, float32, uint32 leaves (a resume's
    # usual target was refused, "the target is a I32 array").
    with warnings.catch_warnings():  # JAX casts 2**64 - 1 to see its shape
        warnings.simplefilter("ignore", RuntimeWarning)
        narrowed = jax.eval_shape(lambda: state)
    assert narrowed["pos"].dtype == jnp.int32
    with cj.CheckpointManager(root, async_save=False) as mgr:
        mgr.save(1, state)
        restored = mgr.restore(1, target=target)
        from_eval_shape = mgr.restore(1, target=narrowed)
        # A NumPy target asks for its own dtype.
        with pytest.raises(ckpt.InvalidArgument, match="entry 'pos'"):
            mgr.restore(1, target=dict(state, pos=np.zeros(1, np.int32)))
    for k, v in state.items():
        for got in (restored[k], from_eval_shape[k]):
            assert isinstance(got, np.ndarray), k
            assert got.dtype == v.dtype and bits(got) == bits(v)


def test_a_python_scalar_restores_onto_eval_shapes_0d_leaf(root):
    # jax.eval_shape makes a weak-typed 0-d leaf of a state's Python scalar
    # (`"step": 0` int32, `"lr": 0.001` float32): the scalar comes back as
    # the state held it, even where the leaf's dtype could not hold it.
    def init():
        return {"w": jnp.zeros(3), "step": 0, "lr": 0.001}
    abstract = jax.eval_shape(init)
    assert abstract["lr"].weak_type and abstract["step"].weak_type
    with cj.CheckpointManager(root, async_save=False) as mgr:
        mgr.save(5, {"w": jnp.ones(3), "step": 5, "lr": 0.001})
        restored = mgr.restore(5, target=abstract)
        mgr.save(6, {"w": jnp.ones(3), "step": 2**40, "lr": 1e300})
        big = mgr.restore(6, target=abstract)
        # A 0-d leaf that is not weak-typed asks for an array of its dtype:
        # the value must fit it exactly, and the refusal says so alone.
        strict = dict(abstract, step=jax.ShapeDtypeStruct((), jnp.int32),
                      lr=jax.ShapeDtypeStruct((), jnp.float32))
        exact = mgr.restore(5, target=dict(strict, lr=1.0))
        with pytest.raises(ckpt.InvalidArgument,
                           match=r"entry 'step'.*cannot hold exactly"):
            mgr.restore(6, target=dict(strict, lr=1.0))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no NumPy overflow warning
            with pytest.raises(ckpt.InvalidArgument,
                               match=r"entry 'lr'.*1e\+300.*float32 cannot"):
                mgr.restore(6, target=dict(strict, step=0))
            with pytest.raises(ckpt.InvalidArgument,
                               match=r"entry 'lr'.*0.001.*float32 cannot"):
                mgr.restore(5, target=dict(strict, step=0))
    assert restored["step"] == 5 and type(restored["step"]) is int
    assert restored["lr"] == 0.001 and type(restored["lr"]) is float
    assert big["step"] == 2**40 and big["lr"] == 1e300
    assert exact["step"].dtype == jnp.int32 and int(exact["step"]) == 5


def test_typed_prng_keys_restore_as_keys_onto_a_target(root):
    # A Flax train state's rng: new-style typed keys, one and a sharded
    # batch of them.
    mesh = jax.make_mesh((8,), ("d",))
    keys = jax.device_put(jax.random.split(jax.random.key(1), 8),
                          NamedSharding(mesh, P("d")))
    state = {"w": jnp.ones(3), "rng": jax.random.key(0), "keys": keys}
    abstract = jax.eval_shape(lambda: state)
    abstract["keys"] = jax.ShapeDtypeStruct(keys.shape, keys.dtype,
                                            sharding=keys.sharding)
    with cj.CheckpointManager(root, async_save=False) as mgr:
        mgr.save(1, state)
        restored = mgr.restore(1, target=abstract)
        raw = mgr.restore(1)
    for name in ("rng", "keys"):
        assert restored[name].dtype == state[name].dtype, name
        assert bits(jax.random.key_data(restored[name])) == \
            bits(jax.random.key_data(state[name])), name
    assert restored["keys"].sharding == keys.sharding
    # The same draws as before the save.
    assert bits(jax.random.uniform(restored["rng"], (4,))) == \
        bits(jax.random.uniform(state["rng"], (4,)))
    # Without a target: the keys' data, as jax.random.key_data gives it.
    assert raw["keys"].dtype == jnp.uint32 and raw["keys"].shape == (8, 2)


def test_float8_dtypes_round_trip_and_others_are_refused(root):
    rng = np.random.default_rng(1)
    values = rng.standard_normal((16, 8)).astype(np.float32)
    state = {"e4m3": jnp.asarray(values, jnp.float8_e4m3fn),
             "e5m2": jnp.asarray(values, jnp.float8_e5m2)}
    with cj.CheckpointManager(root, async_save=False) as mgr:
        mgr.save(1, state)
        restored = mgr.restore(1, target=state)
        for k in state:
            assert bits(restored[k]) == bits(state[k])
        bad = {"w": jnp.asarray(values, jnp.float8_e4m3fnuz)}
        with pytest.raises(ckpt.InvalidArgument, match="'w'.*float8_e4m3fnuz"):
            mgr.save(2, bad)
        assert mgr.all_steps() == [1]


def test_a_pytree_that_cannot_be_saved_is_an_error_naming_the_entry(root):
    gone = jnp.ones((8, 8))
    gone.delete()
    with cj.CheckpointManager(root, async_save=False) as mgr:
        with pytest.raises(ckpt.InvalidArgument,
                           match="entry 'params.w': cannot copy the "
                                 "jax.Array to the host"):
            mgr.save(1, {"params": {"w": gone}})
        with pytest.raises(ckpt.InvalidArgument, match="is a list"):
            mgr.save(1, [jnp.ones(2)])
        with pytest.raises(ckpt.InvalidArgument, match="'opt.1.x'"):
            mgr.save(1, {"opt": [1, {"x": object()}]})
        # Each names the save and the root once, before what is wrong.
        prefix = f"save step 1 to {mgr.url}: "
        for bad in ({"params": {"w": gone}}, [jnp.ones(2)],
                    {"opt": [1, {"x": object()}]}, {"a.b": 1, "a": {"b": 2}},
                    {"d": {"a\nb": 1}}):
            with pytest.raises(ckpt.InvalidArgument) as raised:
                mgr.save(1, bad)
            message = str(raised.value)
            assert message.startswith(prefix) and \
                message.count(mgr.url) == 1, message
        assert mgr.all_steps() == []
    # An asynchronous save raises them at once, the same way.
    with cj.CheckpointManager(root) as mgr:
        with pytest.raises(ckpt.InvalidArgument,
                           match=r"^save step 2 to .*: entry 'a': ckpt "
                                 r"cannot save a value of type object"):
            mgr.save(2, {"a": object()})


def test_an_async_save_lets_the_arrays_go_at_once(root):
    state = training_state()
    want = [bits(x) for x in arrays(state)]
    with cj.CheckpointManager(root) as mgr:  # async_save is the default
        assert mgr.save(5, state) is True
        state["rng"][:] = 0  # a NumPy array may change at once
        # The device arrays may go at once: the save holds its host copy.
        # New arrays of the same sizes take their freed memory.
        for x in arrays(state):
            if isinstance(x, jax.Array):
                x.delete()
        other = [jnp.full(x.shape, 9, x.dtype) for x in arrays(state)
                 if isinstance(x, jax.Array)]
        jax.block_until_ready(other)
        mgr.wait_until_finished()
        assert mgr.latest_step() == 5
        restored = mgr.restore(5)
    assert [bits(x) for x in arrays(restored)] == want


def test_an_async_save_that_fails_loses_no_later_step_unseen(root):
    # An Orbax-style loop saves and never waits until the end: a save that
    # fails (its step committed already) makes the later ones save nothing,
    # and wait_until_finished() says which, rather than let them commit
    # around a hole nobody was told of.
    with cj.CheckpointManager(root, async_save=False) as mgr:
        for step in (0, 1, 2):
            mgr.save(step, {"w": jnp.full(3, step)})
    mgr = cj.CheckpointManager(root)
    for step in (2, 3, 4):
        assert mgr.save(step, {"w": jnp.full(3, step)}) is True
    with pytest.raises(ckpt.AlreadyExists,
                       match=r"step 2.*steps 3 and 4 were not saved"):
        mgr.wait_until_finished()
    assert mgr.all_steps() == [0, 1, 2]
    mgr.save(3, {"w": jnp.full(3, 3)})
    mgr.close()
    assert cj.CheckpointManager(root).all_steps() == [0, 1, 2, 3]


def test_restored_arrays_outlive_the_manager_and_each_other(root):
    # On the CPU a restored array uses the memory ckpt read into in place
    # (no second copy): it must stay whole after the manager, the host
    # array and a second restore are gone, and two restores must not share.
    import gc

    state = training_state()
    want = [bits(x) for x in arrays(state)]
    target = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
        if isinstance(x, jax.Array) else x, state)
    with cj.CheckpointManager(root, async_save=False) as mgr:
        mgr.save(1, state)
        first = mgr.restore(1, target)
        second = mgr.restore(1, target)
    del second
    gc.collect()
    # Memory freed by the second restore is taken by new arrays; the first
    # restore's must not be it.
    junk = [np.full(x.shape, 7, np.asarray(x).dtype)
            for x in arrays(state)]
    assert [bits(x) for x in arrays(first)] == want
    del junk


def test_keep_last_interval_and_steps(root):
    state = {"w": jnp.zeros((4, 4))}
    with cj.CheckpointManager(root, keep_last=2, save_interval_steps=2) as mgr:
        assert mgr.latest_step() is None and mgr.all_steps() == []
        saved = []
        for step in range(1, 9):
            state = {"w": state["w"] + 1}
            saved.append(mgr.save(step, state))
        mgr.wait_until_finished()
        # The root's first step is saved whatever the interval (Orbax's
        # rule), then every second.
        assert saved == [True, True, False, True, False, True, False, True]
        assert mgr.all_steps() == [6, 8]
        assert mgr.latest_step() == 8
        assert float(mgr.restore()["w"][0, 0]) == 8.0
        assert float(mgr.restore(6)["w"][0, 0]) == 6.0
        assert mgr.save(9, state, force=True) is True
        mgr.wait_until_finished()
        assert mgr.all_steps() == [8, 9]
        with pytest.raises(ckpt.AlreadyExists):
            mgr.save(9, state, force=True)
            mgr.wait_until_finished()
    with pytest.raises(ckpt.FailedPrecondition):
        mgr.latest_step()


def test_a_target_that_disagrees_is_an_error_naming_the_entry(root):
    state = training_state()
    with cj.CheckpointManager(root, async_save=False) as mgr:
        mgr.save(1, state)
        mesh = mesh_of((8,), ("all",))

        def target(**changes):
            t = target_on(state, mesh, lambda x: P())
            for path, leaf in changes.items():
                keys = path.split("/")
                node = t
                for k in keys[:-1]:
                    node = node[k]
                node[keys[-1]] = leaf
            return t

        sds = jax.ShapeDtypeStruct
        cases = [
            (target(params={}), ckpt.InvalidArgument,
             "holds entry 'params.kernel', which the target lacks"),
            (dict(target(), extra=sds((2,), jnp.float32)), ckpt.NotFound,
             "no entry 'extra' of the target"),
            (target(**{"params/kernel": sds((128, 256), jnp.float32)}),
             ckpt.InvalidArgument,
             r"'params.kernel'.*shape \[128, 256\].*shape \[256, 128\]"),
            (target(**{"params/bias": sds((128,), jnp.float32)}),
             ckpt.InvalidArgument, r"'params.bias'.*F32.*BF16"),
            (dict(target(), losses=[np.float64(0), 0, 0]),
             ckpt.NotFound, "no entry 'losses.2'"),
            (target(**{"params/norm": None}), ckpt.InvalidArgument,
             "'params.norm' is None in the target"),
            (target(**{"params/bias": sds((128,), jnp.bfloat16,
                                          sharding=NamedSharding(
                                              mesh_of((3,), ("t",)),
                                              P("t")))}),
             ckpt.InvalidArgument,
             r"'params.bias': the target's sharding cannot hold its shape"),
            # jax.eval_shape of sharded arrays: shardings on an AbstractMesh,
            # with no devices to place anything on.
            (target(**{"params/bias": sds((128,), jnp.bfloat16,
                                          sharding=NamedSharding(
                                              mesh.abstract_mesh, P()))}),
             ckpt.InvalidArgument,
             r"'params.bias': the target's sharding .* names no devices"),
        ]
        for bad, error, message in cases:
            with pytest.raises(error, match=message) as raised:
                mgr.restore(1, target=bad)
            assert "restore step 1 of" in str(raised.value)
        # An array target is only read: it keeps its bytes and stays alive.
        mine = {k: (jax.device_put(np.zeros(v.shape, v.dtype))
                    if k == "kernel" else v)
                for k, v in state["params"].items()}
        with pytest.raises(ckpt.NotFound, match="'params.x'"):
            mgr.restore(1, target=dict(state, params=dict(mine, x=1)))
        assert not mine["kernel"].is_deleted()
        assert not np.asarray(mine["kernel"]).any()
        good = mgr.restore(1, target=dict(state, params=mine))
        assert bits(good["params"]["kernel"]) == \
            bits(state["params"]["kernel"])
        assert good["params"]["kernel"].sharding == mine["kernel"].sharding


def test_a_target_whose_containers_differ_is_an_error_though_names_agree(
        root):
    # {0: a, 1: b} and [a, b] both make the entries "d.0" and "d.1".
    a, b = jnp.ones(2), jnp.zeros(2)
    state = {"d": {0: a, 1: b}, "t": (a, None), "e": (),
             "n": Moments(a, b), "x.y": a}
    with cj.CheckpointManager(root, async_save=False) as mgr:
        mgr.save(1, state)
        # Dict keys in any order (jax.eval_shape sorts them); a namedtuple
        # is a dict of its fields on both sides.
        same = dict(state, d={1: b, 0: a})
        for target in (same, jax.eval_shape(lambda: same)):
            restored = mgr.restore(1, target=target)
            assert isinstance(restored["n"], Moments)
            assert bits(restored["d"][1]) == bits(b)
        rest = {k: v for k, v in state.items() if k != "x.y"}
        cases = [
            (dict(state, d=[a, b]), r"entry 'd': the checkpoint holds a "
                                    r"dict with the keys \[0, 1\], the "
                                    r"target a list of 2"),
            (dict(state, d={"0": a, "1": b}),
             r"entry 'd': .*dict with the keys \[0, 1\], the target a "
             r"dict with the keys \['0', '1'\]"),
            (dict(state, t=[a, None]), r"entry 't': the checkpoint holds a "
                                       r"tuple of 2, the target a list"),
            (dict(state, e=[]), r"entry 'e': the checkpoint holds an empty "
                                r"tuple, the target an empty list"),
            (dict(rest, x={"y": a}), r"the top of the pytree: .*'x.y'\], "
                                     r"the target .*'x'\]"),
        ]
        for bad, message in cases:
            with pytest.raises(ckpt.InvalidArgument,
                               match="restore step 1 of .*" + message):
                mgr.restore(1, target=bad)


def test_restore_skips_a_damaged_newest_step(root):
    with cj.CheckpointManager(root, async_save=False) as mgr:
        mgr.save(1, {"w": jnp.full((64,), 1.0)})
        mgr.save(2, {"w": jnp.full((64,), 2.0)})
    data = glob.glob(os.path.join(root, "step-*2", "*.safetensors"))
    assert data, f"no data file of step 2 under {root}"
    with open(data[0], "r+b") as f:
        f.seek(-1, os.SEEK_END)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_END)
        f.write(bytes([byte ^ 0x40]))
    with cj.CheckpointManager(root, create=False) as mgr:
        with pytest.warns(RuntimeWarning, match="skipped step 2"):
            restored = mgr.restore()
        assert float(restored["w"][0]) == 1.0
        with pytest.raises(ckpt.DataLoss):
            mgr.restore(2)


def test_latest_step_is_the_step_restore_loads_and_all_steps_every_one(root):
    with cj.CheckpointManager(root, async_save=False) as mgr:
        for step in (1, 2, 3, 4):
            mgr.save(step, {"w": jnp.full((64,), float(step))})
        assert mgr.latest_step() == max(mgr.all_steps()) == 4

    def data_of(step):
        [path] = glob.glob(os.path.join(root, f"step-*{step}",
                                        "*.safetensors"))
        return path

    # Step 4 lost its data object, step 3's is truncated: both are still
    # committed steps, but latest_step() names the step restore() loads.
    os.remove(data_of(4))
    os.truncate(data_of(3), os.path.getsize(data_of(3)) - 1)
    # Step 2 has a flipped byte, which only reading finds: it is the
    # latest step, and restore() skips it for step 1.
    with open(data_of(2), "r+b") as f:
        f.seek(-1, os.SEEK_END)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_END)
        f.write(bytes([byte ^ 0x40]))
    with cj.CheckpointManager(root, create=False) as mgr:
        assert mgr.all_steps() == [1, 2, 3, 4]
        assert mgr.latest_step() == 2
        incomplete = {i.step for i in mgr.manager.list() if i.incomplete}
        assert incomplete == {3, 4}
        with pytest.warns(RuntimeWarning) as warned:
            restored = mgr.restore()
        assert float(restored["w"][0]) == 1.0
        skipped = " ".join(str(w.message) for w in warned)
        for step in (4, 3, 2):
            assert f"skipped step {step}" in skipped


def test_import_ckpt_needs_no_jax():
    code = ("import sys\n"
            "for m in ('jax', 'jaxlib', 'ml_dtypes'): sys.modules[m] = None\n"
            "import ckpt\n"
            "assert 'jax' not in [m for m in sys.modules if sys.modules[m]]\n"
            "try:\n"
            "    import ckpt.jax\n"
            "except ImportError as e:\n"
            "    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, check=True)
    assert "refused:" in out.stdout and "jax" in out.stdout
