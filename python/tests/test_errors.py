"""Errors surface as ckpt.Error subclasses with the library's message."""

import glob
import os
import subprocess
import sys

import numpy as np
import pytest

import ckpt
from ckpt import _lib

CODES = ["InvalidArgument", "NotFound", "AlreadyExists", "DataLoss",
         "IOError", "Unavailable", "Aborted", "FailedPrecondition"]


@pytest.mark.parametrize("code", CODES)
def test_every_code_maps_to_its_class(code):
    cls = getattr(ckpt, code)
    assert issubclass(cls, ckpt.Error) and cls is not ckpt.Error
    assert cls.__module__ == "ckpt" and cls.__name__ == code
    with pytest.raises(cls) as e:
        _lib._raise_status(code, f"what went wrong: {code}")
    assert str(e.value) == f"what went wrong: {code}"
    others = [getattr(ckpt, c) for c in CODES if c != code]
    assert not isinstance(e.value, tuple(others))


def test_invalid_argument_is_also_a_value_error():
    assert issubclass(ckpt.InvalidArgument, ValueError)
    assert not issubclass(ckpt.DataLoss, ValueError)


def test_bad_url_is_invalid_argument():
    with pytest.raises(ckpt.InvalidArgument, match="nope://x"):
        ckpt.open("nope://x")


def test_missing_root_without_create_is_not_found(tmp_path):
    with pytest.raises(ckpt.NotFound):
        ckpt.open(tmp_path / "absent", create=False)


def test_a_bad_option_creates_no_root(tmp_path):
    path = tmp_path / "new-root"
    for bad in ({"chunk_size": 0}, {"keep_last": -1},
                {"lease_seconds": 0.5}):
        with pytest.raises(ckpt.InvalidArgument):
            ckpt.open(str(path), create=True, **bad)
        assert not path.exists()
    with pytest.raises(TypeError, match="option keep_last must be a number, "
                                        "not str"):
        ckpt.open(str(path), create=True, keep_last="2")
    assert not path.exists()


def test_a_misspelt_option_of_open_names_the_nearest_one(tmp_path):
    path = tmp_path / "new-root"
    with pytest.raises(TypeError, match=r"ckpt.open\(.*new-root\) got an "
                       r"unexpected keyword argument 'keep_lats'.*did you "
                       r"mean 'keep_last'\?"):
        ckpt.open(str(path), create=True, keep_lats=3)
    assert not path.exists()


def test_an_options_error_names_the_root_it_refuses(tmp_path):
    path = str(tmp_path / "new-root")
    opened = f"ckpt.open({path}): "
    for bad, error, says in [
            ({"keep_last": -1}, ckpt.InvalidArgument, "keep_last"),
            ({"compression": "zst"}, ckpt.InvalidArgument,
             "'zst'; did you mean 'zstd'?"),
            ({"compression_level": 1.5}, TypeError, "compression_level"),
            ({"keep_last": "2"}, TypeError, "keep_last must be a number")]:
        with pytest.raises(error) as caught:
            ckpt.open(path, create=True, **bad)
        assert str(caught.value).startswith(opened), caught.value
        assert says in str(caught.value), caught.value
        assert not os.path.exists(path)


def test_ckpt_log_levels_in_any_case_and_a_wrong_one_is_said(tmp_path):
    def run(level, path):
        code = f"import ckpt; ckpt.open({str(path)!r}, create=True)"
        env = dict(os.environ, CKPT_LOG=level)
        return subprocess.run([sys.executable, "-c", code], env=env,
                              capture_output=True, text=True,
                              check=True).stderr

    said = run("verbose", tmp_path / "a")
    assert "CKPT_LOG=verbose names no level (debug, info, warning" in said
    assert "created a new, empty root" in said  # warnings still logged
    said = run("ERROR", tmp_path / "b")
    assert "names no level" not in said
    assert "created a new, empty root" not in said  # errors only


def test_missing_step_is_not_found(mgr):
    with pytest.raises(ckpt.NotFound, match="step 9"):
        mgr.load(9)
    with pytest.raises(ckpt.NotFound):
        mgr.load()  # no checkpoint at all
    with pytest.raises(ckpt.NotFound):
        mgr.delete(9)


def test_committed_step_is_already_exists(mgr):
    mgr.save(1, {"x": np.zeros(1)})
    with pytest.raises(ckpt.AlreadyExists, match="step 1"):
        mgr.save(1, {"x": np.zeros(1)})


def test_a_step_past_64_bits_is_refused_not_wrapped(mgr):
    # 2**64 + 20 would reach the library as step 20: a delete of it would
    # delete step 20.
    mgr.save(20, {"x": np.zeros(1)})
    for step in (2**63, 2**64 + 20, 2**65):
        for call in (lambda: mgr.save(step, {"x": np.zeros(1)}),
                     lambda: mgr.load(step), lambda: mgr.delete(step)):
            with pytest.raises(ckpt.InvalidArgument,
                               match=f"step {step} is too large"):
                call()
    assert [i.step for i in mgr.list()] == [20]
    # An integer of another type is a step; a float or a str is not.
    mgr.save(np.int64(21), {"x": np.zeros(1)}, epoch=np.int32(2))
    assert [(i.step, i.epoch) for i in mgr.list()] == [(20, -1), (21, 2)]
    for bad in (21.0, "21"):
        with pytest.raises(TypeError, match="a step must be an int"):
            mgr.load(bad)
    with pytest.raises(TypeError, match="epoch must be an int, not float"):
        mgr.save(22, {"x": np.zeros(1)}, epoch=1.5)
    assert mgr.latest() == 21


def test_an_object_with_a_state_is_refused_saying_what_to_save(mgr):
    # A model or optimizer put in the state as it is, not its
    # state_dict() (as ckpt.torch.save takes it), and a torch.Generator:
    # the error says what of it can be saved.
    class Model:
        def state_dict(self):
            return {"w": np.zeros(2)}

        def load_state_dict(self, state):
            pass

    class Generator:
        def get_state(self):
            return b"state"

    with pytest.raises(ckpt.InvalidArgument,
                       match=r"entry 'model': .* type Model .*: save its "
                             r"state_dict\(\), or .* ckpt.torch.save"):
        mgr.save(1, {"model": Model()})
    with pytest.raises(ckpt.InvalidArgument,
                       match=r"type Generator .*: save its get_state\(\)$"):
        mgr.save(1, {"rng": Generator()})
    with pytest.raises(ckpt.InvalidArgument, match=r"of them\)$"):
        mgr.save(1, {"a": object()})


def test_bad_entry_name_is_invalid_argument(mgr):
    with pytest.raises(ckpt.InvalidArgument, match="entry name"):
        mgr.save(1, {"a/../b": np.zeros(1)})


def test_a_state_a_save_refuses_is_named_with_the_save_and_root(mgr):
    # The checks of the state know the entry; the error also names the
    # call it came from, once, in its own class.
    prefix = f"save step 3 to {mgr.url}: "
    cases = [
        ({"a.b": 1, "a": {"b": 2}}, "state['a.b'] and state['a']['b'] both "
                                    "make the entry name 'a.b'"),
        ({"a": object()}, "entry 'a': ckpt cannot save a value of type "
                          "object"),
        ({"a": {("a", 1): 2}}, "key ('a', 1) at state['a']: keys must be "
                               "str or int"),
        ({"d": {"a\nb": 1}}, 'entry name "d.a\\x0ab" contains a control '
                             'character'),
    ]
    for state, why in cases:
        for save in (mgr.save, lambda s, st: mgr.save_async(s, st).wait()):
            with pytest.raises(ckpt.InvalidArgument) as raised:
                save(3, state)
            assert str(raised.value).startswith(prefix + why), \
                str(raised.value)
    with pytest.raises(ckpt.InvalidArgument) as raised:
        mgr.save(3, {"x": 1}, metadata={"k": 1})
    assert str(raised.value) == prefix + "metadata must map str to str"
    mgr.save(3, {"x": 1})
    # The library's own error names the step and the root already.
    with pytest.raises(ckpt.AlreadyExists) as raised:
        mgr.save(3, {"x": 1})
    assert str(raised.value).count(mgr.url) == 1
    assert [i.step for i in mgr.list()] == [3]


def test_a_rank_local_number_is_refused_saying_how_to_save_it(mgr):
    with pytest.raises(ckpt.InvalidArgument,
                       match=r"rank-local value must be a tensor, an array or "
                             r"bytes, not int .*numpy\.array"):
        mgr.save(1, {"loader": ckpt.RankLocal(5)})
    mgr.save(1, {"loader": ckpt.RankLocal(np.array(5))})
    assert mgr.load()["loader"] == 5


def flip_last_byte(root):
    [data] = glob.glob(os.path.join(root, "step-*", "*.safetensors"))
    with open(data, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_END)
        f.write(bytes([byte ^ 0x40]))


def test_corrupt_data_file_raises_data_loss(root):
    mgr = ckpt.open(root)
    mgr.save(1, {"w": np.arange(1000, dtype=np.float32)})
    flip_last_byte(root)
    with pytest.raises(ckpt.DataLoss, match="checksum"):
        mgr.load(1)
    with pytest.raises(ckpt.DataLoss, match="checksum"):
        mgr.load_into({"w": np.zeros(1000, np.float32)})
    with pytest.raises(ckpt.DataLoss):
        ckpt.open(root).load()


def test_a_step_that_lost_a_data_object_is_listed_as_incomplete(root):
    mgr = ckpt.open(root)
    mgr.save(1, {"w": np.arange(10, dtype=np.float32)})
    mgr.save(2, {"w": np.arange(10, dtype=np.float32) + 1})
    [data] = glob.glob(os.path.join(root, "step-*2", "*.safetensors"))
    os.remove(data)
    first, second = mgr.list()
    assert first.incomplete == ""
    assert "missing" in second.incomplete
    assert os.path.basename(data) in second.incomplete
    # Resuming skips it for the newest complete one.
    assert mgr.latest() == 1
    np.testing.assert_array_equal(mgr.load()["w"], np.arange(10, dtype=np.float32))


def test_a_second_writer_on_one_root_is_refused_naming_the_first(root):
    first = ckpt.open(root)
    first.save(1, {"w": np.zeros(3)})
    second = ckpt.open(root, lease_wait_seconds=0)
    # Both in this process (a notebook's cell run again): said up front and
    # in the error, which names this process's pid.
    here = "another ckpt.CheckpointManager of this process"
    with pytest.warns(RuntimeWarning, match=f"waits for the lease.*{here}"), \
            pytest.raises(ckpt.FailedPrecondition,
                          match=f"another party owns.*pid {os.getpid()}.*"
                                f"here the holder is {here}.*close"):
        second.save(2, {"w": np.ones(3)})
    with pytest.warns(RuntimeWarning, match=here):
        handle = second.save_async(2, {"w": np.ones(3)})
    with pytest.raises(ckpt.FailedPrecondition, match="another party owns"):
        handle.wait()
    del first  # the first job ends and gives the root back
    second.save(2, {"w": np.ones(3)})
    assert [i.step for i in second.list()] == [1, 2]


def test_a_library_without_the_packages_functions_is_refused_by_name():
    # A shared library that loads but lacks what the package calls (an
    # older build named by CKPT_LIBRARY): ImportError naming the library
    # and the function, not an AttributeError from ctypes.
    import subprocess
    import sys
    other = "/lib/x86_64-linux-gnu/libm.so.6"
    if not os.path.exists(other):
        other = "libm.so.6"
    env = dict(os.environ, CKPT_LIBRARY=other)
    r = subprocess.run([sys.executable, "-c", "import ckpt"], env=env,
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "ImportError" in r.stderr, r.stderr
    assert f"its library {other} lacks ckpt_" in r.stderr, r.stderr
