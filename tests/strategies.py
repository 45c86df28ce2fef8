"""Hypothesis strategies: small shapes (incl. size-1 and zero-length axes) and broadcastable partners."""
import numpy as np
from hypothesis import strategies as st

dims = st.integers(min_value=1, max_value=3)


@st.composite
def shapes(draw, min_dims=1, max_dims=4, allow_zero=False):
    n = draw(st.integers(min_dims, max_dims))
    low = 0 if allow_zero else 1
    return tuple(draw(st.integers(low, 3)) for _ in range(n))


@st.composite
def broadcast_pair(draw, allow_zero=False):
    """(shape_a, shape_b) that broadcast: b drops leading axes of a and turns some axes into 1."""
    a = draw(shapes(allow_zero=allow_zero))
    keep = draw(st.integers(0, len(a)))
    b = tuple(1 if draw(st.booleans()) else n for n in a[len(a) - keep:])
    if draw(st.booleans()):
        a, b = b, a
    return a, b


def away_from_zero(rng, shape, low=0.5, high=2.0):
    """Values in ±[low, high]: off the kinks of relu/abs and far from poles of 1/x and log."""
    return rng.uniform(low, high, shape) * rng.choice([-1.0, 1.0], shape)


def positive(rng, shape, low=0.5, high=2.0):
    return rng.uniform(low, high, shape)
