"""Once the Numba backend is made, a loop that allocates and frees the same large arrays (a training step's
pattern, one of them above the 32 MB that glibc by default always maps on its own and unmaps when freed) gets
them from the heap, at the same addresses every step: the pages written last step, with no page faults."""
import subprocess
import sys

import pytest

LOOP = """
import ctypes, resource, sys
import numpy as np
if sys.argv[1] == "numba":
    import minitensor as mt
    mt.get_backend("numba")
sbrk = ctypes.CDLL(None).sbrk
sbrk.restype, sbrk.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t]
def step():
    arrays = [np.ones(n, np.float32) for n in (2**18, 2**20, 9 * 2**20)]  # 1 MB, 4 MB, 36 MB, every page written
    return [a.ctypes.data for a in arrays]
for _ in range(3):
    last = step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
same = all(step() == last for _ in range(10))
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(all(address < sbrk(0) for address in last), same, faults)
"""


def run(backend):
    """(all arrays below the program break, i.e. in the heap; the same addresses every step; page faults of ten
    steps after three warm-up ones), in a fresh process (malloc's state is per process)."""
    done = subprocess.run([sys.executable, "-c", LOOP, backend], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    in_heap, same, faults = done.stdout.split()
    return in_heap == "True", same == "True", int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_numba_backend_steps_reuse_their_freed_memory():
    assert not run("numpy")[0]              # glibc's defaults: the 36 MB array is a mapping of its own
    in_heap, same, faults = run("numba")
    assert in_heap and same and faults < 100
