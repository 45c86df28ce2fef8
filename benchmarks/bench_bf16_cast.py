"""float32 <-> bf16 conversion on the CPU: the NumPy reference and every Numba version.

Size: the encoder output of the CPU Transformer benchmark, (2048, 256) float32, both ways.
Bytes (napkin math): narrowing reads 4 and writes 2 bytes an element, widening the reverse: 6 * N each.
The GPU versions are timed against the device copy bandwidth in bench_gpu_kernels.py.
"""
import numpy as np

from benchmarks.common import parse_args, run_table
from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast.numba_cpu import VERSIONS, bf16_cast
from minitensor.kernels.bf16_cast.reference import bf16_cast_ref

SHAPE = (2048, 256)


def main():
    args = parse_args(__doc__)
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    bits = bf16_cast_ref(x, BF16)
    candidates = [("reference", lambda: (bf16_cast_ref(x, BF16), bf16_cast_ref(bits, np.float32)), False)]
    for v, kernel in VERSIONS.items():
        candidates.append((f"numba v{v}", lambda k=kernel: (k(x, BF16), k(bits, np.float32)), True))
    candidates.append(("numba wrapper (DEFAULT)", lambda: (bf16_cast(x, BF16), bf16_cast(bits, np.float32)), True))
    run_table(f"bf16_cast {SHAPE} float32 -> bf16 -> float32", candidates, 2 * 6 * x.size, args)


if __name__ == "__main__":
    main()
