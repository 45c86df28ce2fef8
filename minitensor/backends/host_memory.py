"""Keep freed host memory for the next allocation (glibc malloc): a CPU training step allocates and frees
the same arrays every step, and glibc hands large freed blocks back to the operating system, so each step
faults its pages in again (~5,200 page faults, ~20 MB, ~15 ms of a 250 ms Multi30k step on one thread).

With the top of the heap never trimmed and no block below 32 MB mapped on its own, the step reuses its own
freed memory: the peak resident size is the same, it is just not returned between steps.
"""
import ctypes

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc <malloc.h>
SETTINGS = ((M_TRIM_THRESHOLD, 2**31 - 1),     # never shrink the heap
            (M_TOP_PAD, 64 * 2**20),           # grow it 64 MB at a time
            (M_MMAP_THRESHOLD, 32 * 2**20))    # blocks up to 32 MB (glibc's limit) from the heap, not their own mapping


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory (SETTINGS); False where the C library has no mallopt (not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return all(mallopt(option, value) == 1 for option, value in SETTINGS)
