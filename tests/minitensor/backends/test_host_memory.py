"""Once the Numba backend is made, a loop that allocates and frees the same large arrays (a training step's
pattern, one of them above glibc's own 32 MB limit for reusing freed blocks) stops faulting pages in."""
import subprocess
import sys

import pytest

LOOP = """
import resource, sys
import numpy as np
if sys.argv[1] == "numba":
    import minitensor as mt
    mt.get_backend("numba")
def step():
    arrays = [np.ones(n, np.float32) for n in (2**18, 2**20, 9 * 2**20)]  # 1 MB, 4 MB, 36 MB, every page written
    del arrays
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(backend):
    """Page faults of ten steps after three warm-up steps, in a fresh process (malloc's state is per process)."""
    run = subprocess.run([sys.executable, "-c", LOOP, backend], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return int(run.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_numba_backend_steps_reuse_their_freed_memory():
    assert faults("numpy") > 1000   # glibc's defaults: the freed blocks are unmapped, their pages fault in again
    assert faults("numba") < 100
