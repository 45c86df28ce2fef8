"""NumbaBackend keeps freed memory in the heap: a step's large temporaries reuse pages instead of faulting in fresh ones."""
import platform
import subprocess
import sys
import textwrap

import pytest

resource = pytest.importorskip("resource")

# Two 30 MiB arrays made and freed again and again, as a training step does with its logits and
# their gradient: the page faults of four repeats (after two to settle), printed.
REPEATS = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from minitensor.backends.numba_cpu import keep_freed_memory
    if sys.argv[1] == "keep":
        assert keep_freed_memory()
    n = 30 * 2**20 // 8
    for i in range(6):
        if i == 2:
            start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        x = np.ones(n); y = np.ones(n); del x; del y
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)
""")


def _faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", REPEATS, mode], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_freed_blocks_are_reused_without_page_faults():
    by_default, kept = _faults("default"), _faults("keep")
    assert by_default > 1000, f"the pattern should fault by default ({by_default}); the test no longer tests anything"
    assert kept < by_default / 10, (kept, by_default)
