"""Solutions to chapter 07's exercises (checked by `check_sinusoids`, `check_relative_rotation`)."""
import numpy as np


def sinusoids(max_len: int, d_model: int) -> np.ndarray:
    """§3.5: PE(pos, 2i) = sin(pos/10000^(2i/d_model)), PE(pos, 2i+1) = cos(same), float64 (L, D)."""
    pos = np.arange(max_len, dtype=np.float64)[:, None]
    two_i = np.arange(0, d_model, 2, dtype=np.float64)[None, :]
    angle = pos / 10000.0 ** (two_i / d_model)
    table = np.empty((max_len, d_model))
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle)
    return table


def relative_rotation(k: int, d_model: int) -> np.ndarray:
    """Block-diagonal M with PE(pos + k) = M PE(pos): a rotation by k·ω_i in each (sin, cos) pair."""
    M = np.zeros((d_model, d_model))
    for i in range(d_model // 2):
        a = k / 10000.0 ** (2 * i / d_model)
        M[2 * i, 2 * i], M[2 * i, 2 * i + 1] = np.cos(a), np.sin(a)           # new sin = sin·cos a + cos·sin a
        M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = -np.sin(a), np.cos(a)  # new cos = cos·cos a − sin·sin a
    return M
