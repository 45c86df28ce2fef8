"""Adam step: float64 NumPy reference, a float32 NumPy twin, and every Numba version.

Size: about the parameter count of the CPU Transformer benchmark (`train bench --preset cpu`): P = 10M float32.
Bytes (napkin math): read param, grad, m, v and write param, m, v, 7 * P * 4.
Each call updates the buffers in place; repeated calls keep them finite, so timing is fair.
"""
import numpy as np

from benchmarks.common import parse_args, run_table
from minitensor.kernels.adam_step.numba_cpu import VERSIONS, adam_step
from minitensor.kernels.adam_step.reference import adam_step_ref

P = 10_000_000
HYPER = dict(lr=1e-4, beta1=0.9, beta2=0.98, eps=1e-9, step=10)  # §5.3


def adam_step_numpy32(param, grad, m, v, lr, beta1, beta2, eps, step):
    """The fair NumPy baseline: float32 in place, with out= to limit temporaries."""
    m *= np.float32(beta1)
    m += np.float32(1 - beta1) * grad
    v *= np.float32(beta2)
    v += np.float32(1 - beta2) * grad * grad
    denom = np.sqrt(v)
    denom *= np.float32(1 / np.sqrt(1 - beta2**step))
    denom += np.float32(eps)
    param -= np.float32(lr / (1 - beta1**step)) * m / denom


def main():
    args = parse_args(__doc__)
    rng = np.random.default_rng(0)
    param = rng.standard_normal(P).astype(np.float32)
    grad = rng.standard_normal(P).astype(np.float32)
    m = np.zeros(P, np.float32)
    v = np.zeros(P, np.float32)
    h = HYPER
    candidates = [("reference", lambda: adam_step_ref(param, grad, m, v, **h), False),
                  ("numpy float32", lambda: adam_step_numpy32(param, grad, m, v, **h), False)]
    for ver, kernel in VERSIONS.items():
        candidates.append((f"numba v{ver}", lambda k=kernel: k(param, grad, m, v, h["lr"], h["beta1"],
                                                               h["beta2"], h["eps"], h["step"]), True))
    candidates.append(("numba wrapper (DEFAULT)", lambda: adam_step(param, grad, m, v, **h), True))
    run_table(f"adam_step ({P},) float32", candidates, 7 * P * 4, args)


if __name__ == "__main__":
    main()
