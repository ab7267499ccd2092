"""Save and load make no copy of the arrays: the process's peak memory
does not grow by the size of the state."""

import subprocess
import sys
import textwrap

import numpy as np

PROGRAM = textwrap.dedent("""
    import resource, sys
    import numpy as np
    import ckpt

    def peak_mib():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    mgr = ckpt.open(sys.argv[1])
    w = np.ones(64 << 20, dtype=np.float32)      # 256 MiB, touched
    base = peak_mib()
    mgr.save(1, {"model": {"w": w}})
    after_save = peak_mib()
    del w                                       # RSS drops back by 256 MiB
    got = mgr.load()                            # and the load takes it again
    assert got["model"]["w"].sum() == 64 << 20
    after_load = peak_mib()
    print(after_save - base, after_load - base)
""")


def test_save_and_load_do_not_copy_the_state(tmp_path):
    out = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    save_growth, load_growth = map(float, out.stdout.split())
    # A copy of the state would add 256 MiB.
    assert save_growth < 32, out.stdout
    assert load_growth < 32, out.stdout


def test_no_reference_to_the_arrays_outlives_a_call(mgr):
    w = np.zeros(100)
    refs = sys.getrefcount(w)
    mgr.save(1, {"a": {"w": w}})
    mgr.save_async(2, {"a": {"w": w}}).wait()
    mgr.load_into({"a": {"w": w}})
    mgr.load_into({"a": {"w": w[::-1]}})
    assert sys.getrefcount(w) == refs
