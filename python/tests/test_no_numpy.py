"""The package without NumPy: buffer-protocol tensors (array.array,
memoryview), blobs, metadata, save_async, incremental saves and damage.

A plain unittest module that imports neither NumPy nor pytest, so that it
runs on interpreters that have neither (scripts/test-wheel.sh runs it on
every CPython 3.9+ of pyenv, against the installed wheel):

    python -m unittest discover -s python/tests -p test_no_numpy.py

pytest collects it with the rest. Where NumPy is importable, load() returns
NumPy arrays instead of memoryviews; the checks hold either way (bytes via
memoryview(x).tobytes(), shape via tuple(x.shape)). CKPT_EXPECT_NO_NUMPY=1
makes the module check that NumPy is indeed absent.
"""

import array
import glob
import importlib.util
import os
import struct
import sys
import tempfile
import unittest

import ckpt

HAS_NUMPY = importlib.util.find_spec("numpy") is not None


def raw(x):
    """The bytes of a tensor as load() returns it (memoryview or array)."""
    return memoryview(x).tobytes()


def kind(fmt):
    """('f', 4) for 'f', '<f', '=f'; ('i', 8) for 'q' and 'l': a struct
    format's kind (float, signed, unsigned, bool) and size, whatever
    letter a library picked for it."""
    fmt = fmt.lstrip("@=<>!")
    letter = fmt[-1]
    if letter in "efd":
        k = "f"
    elif letter in "bhilqn":
        k = "i"
    elif letter in "BHILQN":
        k = "u"
    elif letter == "?":
        k = "?"
    else:
        k = letter
    return k, struct.calcsize(fmt)


def flip_a_byte(root):
    [data] = glob.glob(os.path.join(root, "step-*", "*.safetensors"))
    with open(data, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_END)
        f.write(bytes([byte ^ 0x40]))


class NoNumpyTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="ckpt-no-numpy-")
        self.dir = self.tmp.name
        self.root = os.path.join(self.dir, "root")

    def tearDown(self):
        self.tmp.cleanup()

    def assertTensor(self, loaded, source, shape):
        """`loaded` holds the bytes, element type and shape of `source`."""
        self.assertEqual(raw(loaded), raw(source))
        self.assertEqual(tuple(loaded.shape), tuple(shape))
        self.assertEqual(kind(memoryview(loaded).format),
                         kind(memoryview(source).format))
        if not HAS_NUMPY:
            self.assertIsInstance(loaded, memoryview)
            self.assertEqual(loaded.shape, tuple(shape))

    def test_numpy_is_absent_where_expected(self):
        if os.environ.get("CKPT_EXPECT_NO_NUMPY") == "1":
            self.assertFalse(HAS_NUMPY)
            self.assertNotIn("numpy", sys.modules)
        self.assertIsInstance(ckpt.__version__, str)

    def test_buffer_protocol_tensors_round_trip_bit_identically(self):
        weights = array.array("f", [i * 0.25 - 3.0 for i in range(1000)])
        weights[7] = float("nan")  # bits, not values, must match
        ids = array.array("q", [-(2 ** 63), -1, 0, 1, 2 ** 63 - 1])
        grid_source = array.array("d", [i / 7 for i in range(12)])
        grid = memoryview(grid_source).cast("B").cast("d", [3, 4])
        octets = memoryview(bytearray(range(256)))
        mgr = ckpt.open(self.root)
        mgr.save(1, {"model": {"weights": weights, "ids": ids},
                     "grid": grid, "octets": octets})
        state = mgr.load(1)
        self.assertEqual(sorted(state), ["grid", "model", "octets"])
        self.assertTensor(state["model"]["weights"], weights, [1000])
        self.assertTensor(state["model"]["ids"], ids, [5])
        self.assertTensor(state["grid"], grid, [3, 4])
        # A memoryview of a bytearray is a U8 tensor (a bytearray itself
        # is a blob, like bytes).
        self.assertTensor(state["octets"], octets, [256])

    def test_load_into_fills_an_array_in_place(self):
        mgr = ckpt.open(self.root)
        saved = array.array("f", [float(i) for i in range(64)])
        mgr.save(3, {"w": saved, "n": array.array("q", [5, 6, 7])})
        target = array.array("f", [0.0] * 64)
        n = array.array("q", [0, 0, 0])
        state = {"w": target, "n": n}
        info = mgr.load_into(state)
        self.assertEqual(info.step, 3)
        self.assertIs(state["w"], target)
        self.assertIs(state["n"], n)
        self.assertEqual(target.tobytes(), saved.tobytes())
        self.assertEqual(list(n), [5, 6, 7])

    def test_blobs_and_metadata_round_trip(self):
        tree = {"lr": 0.001, "epoch": 12, "name": "run42", "done": False,
                "best": None, "big": 2 ** 62,
                "schedule": [1, 2.5, "three", True, None,
                             {"deep": [1, [2, 3]]}],
                "nested": {"a": {"b": {"c": "d"}}}}
        meta = ckpt.Metadata({"git": "4138f8f", "layers": [64, 64],
                              "dropout": 0.1, "tags": {"x": None}})
        blob = bytes(range(256)) * 3
        mgr = ckpt.open(self.root)
        mgr.save(1, {"config": tree, "meta": meta, "blob": blob,
                     "empty": b"", "mutable": bytearray(b"xyz")})
        state = mgr.load()
        self.assertEqual(state["config"], tree)
        for key, value in tree.items():  # the very types, not just equal
            self.assertIs(type(state["config"][key]), type(value), key)
        self.assertIsInstance(state["meta"], ckpt.Metadata)
        self.assertEqual(dict(state["meta"]), dict(meta))
        self.assertEqual(state["blob"], blob)
        self.assertIsInstance(state["blob"], bytes)
        self.assertEqual(state["empty"], b"")
        self.assertEqual(state["mutable"], b"xyz")
        self.assertIsInstance(state["mutable"], bytes)

    def test_save_async_commits_on_wait(self):
        mgr = ckpt.open(self.root)
        data = array.array("f", [1.5] * 100000)
        handle = mgr.save_async(1, {"w": data, "epoch": 1}, epoch=0)
        data[0] = -1.0  # may change at once: the save has its own copy
        result = handle.wait()
        self.assertTrue(handle.done())
        self.assertFalse(result.skipped)
        self.assertEqual(result.info.step, 1)
        state = mgr.load()
        self.assertEqual(raw(state["w"]),
                         array.array("f", [1.5] * 100000).tobytes())
        self.assertEqual(state["epoch"], 1)
        self.assertEqual([i.step for i in mgr.list()], [1])

    def test_incremental_save_depends_on_the_previous_step(self):
        mgr = ckpt.open(self.root, chunk_size=4096)
        table = array.array("f", [float(i) for i in range(16384)])  # 16 chunks
        mgr.save(1, {"table": table})
        table[0] = -1.0  # one chunk changes
        mgr.save(2, {"table": table}, incremental=True)
        latest = mgr.list()[-1]
        self.assertEqual(latest.step, 2)
        self.assertEqual(latest.parent, 1)
        self.assertEqual(raw(mgr.load(2)["table"]), table.tobytes())
        table[0] = 0.0
        self.assertEqual(raw(mgr.load(1)["table"]), table.tobytes())

    def test_a_corrupted_data_file_raises_data_loss(self):
        mgr = ckpt.open(self.root)
        mgr.save(1, {"w": array.array("f", [float(i) for i in range(1000)])})
        flip_a_byte(self.root)
        with self.assertRaises(ckpt.DataLoss):
            mgr.load(1)
        with self.assertRaises(ckpt.DataLoss):
            mgr.load_into({"w": array.array("f", [0.0] * 1000)})
        self.assertTrue(issubclass(ckpt.DataLoss, ckpt.Error))


if __name__ == "__main__":
    unittest.main()
