"""Weight initialisation. Every function takes its Generator explicitly (no global seeding)."""
from __future__ import annotations

import numpy as np


def xavier_uniform(shape, rng: np.random.Generator, gain: float = 1.0) -> np.ndarray:
    """U(−a, a) with a = gain·√(6/(fan_in + fan_out)) (Glorot & Bengio 2010).

    The paper does not state its initialisation; Xavier-uniform is what the
    reference implementations (tensor2tensor, the Annotated Transformer) use.
    For a 2-d (fan_in, fan_out) weight; extra leading axes multiply both fans.
    """
    fan_in, fan_out = shape[-2], shape[-1]
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    bound = gain * np.sqrt(6.0 / ((fan_in + fan_out) * receptive))
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


def normal(shape, rng: np.random.Generator, std: float) -> np.ndarray:
    return (rng.standard_normal(shape) * std).astype(np.float32)


def zeros(shape) -> np.ndarray:
    return np.zeros(shape, dtype=np.float32)


def ones(shape) -> np.ndarray:
    return np.ones(shape, dtype=np.float32)
