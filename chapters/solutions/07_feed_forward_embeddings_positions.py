"""Solutions to chapter 07's exercises (checked by `check_concat_permutation`, `check_pe_dot`) and the answer key PREDICT."""
import numpy as np


def concat_permutation(d_model: int) -> np.ndarray:
    """Even columns (the sines, pairs i = 0..D/2−1) first, then odd columns (the cosines).

    Why a model cannot tell: the concatenated table is PE·P for a fixed permutation matrix P. PE only
    enters the model through x + PE followed by linear maps (W^Q, W^K, W^V, the FFN's W₁, all with
    matching rows of the learned embedding): (x + PE)P W = (xP + PE P)W, so a model with its embedding
    columns permuted by P and the rows of every first-layer weight permuted by P computes exactly the
    same function. Learning finds either; the layouts are the same model up to relabelling features.
    (tensor2tensor's frequencies ω_i = 10000^(−i/(D/2−1)) differ slightly too: the same geometric range.)
    """
    return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def pe_dot(k: int, d_model: int) -> float:
    """PE(p)·PE(p+k) = Σ_i sin(pω)sin((p+k)ω) + cos(pω)cos((p+k)ω) = Σ_i cos(kω_i), ω_i = 10000^(−2i/D):
    independent of p, even in k, and equal to D/2 at k = 0."""
    omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
    return float(np.cos(k * omega).sum())


PREDICT = """Exercise 1. Pair i = 0 is (sin pos, cos pos), wavelength 2π: two integer positions never share it
exactly (that would need them to differ by a multiple of 2π), though pos and pos + 6 (6 ≈ 2π − 0.28) come
close. Full encodings: no two positions below 10,000 are identical. Identical encodings need pos·ω_i to agree
modulo 2π for every pair i at once; for the paper's d_model = 512 the slowest pair's angle pos/10000^(510/512)
stays below 2π up to pos ≈ 60,000, so that pair alone already tells all of them apart."""
