"""Solutions to chapter 01's exercises (checked by `check_unbroadcast`, `check_matmul_shape`) and the answer key PREDICT."""
import numpy as np


def unbroadcast(grad: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum `grad` back to `shape`: drop the leading axes broadcasting added, sum size-1 axes keeping them."""
    lead = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(lead))) if lead else grad              # added axes: sum them away
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=stretched, keepdims=True) if stretched else grad   # size-1 axes: sum, keep


def matmul_shape(a_shape: tuple, b_shape: tuple) -> tuple:
    """Shape of a @ b (both at least 2-d): batch axes broadcast, (M, K) @ (K, N) -> (M, N)."""
    if a_shape[-1] != b_shape[-2]:
        raise ValueError(f"inner sizes differ: {a_shape[-1]} and {b_shape[-2]}")
    batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    return tuple(batch) + (a_shape[-2], b_shape[-1])


PREDICT = """Exercise 1. (3, 1, 4) + (2, 1): align from the right, (3, 1, 4) and (1, 2, 1) -> (3, 2, 4).
The second operand's gradient has its own shape, (2, 1): the (3, 2, 4) gradient is summed over the
leading axis broadcasting added (3) and over the last axis, where its size 1 was stretched to 4
(kept as size 1)."""
