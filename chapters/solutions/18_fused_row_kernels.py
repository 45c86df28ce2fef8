"""Solutions to chapter 18's exercises (checked by `check_welford_merge`, `check_online_logsumexp`) and the
answer key PREDICT."""
import math


def welford_merge(a, b):
    """(n, mean, M2) of two disjoint pieces (Chan, Golub and LeVeque): with δ = mean_b − mean_a,
    mean = mean_a + δ n_b / n and M2 = M2_a + M2_b + δ² n_a n_b / n (the spread between the two means)."""
    (n_a, mean_a, m2_a), (n_b, mean_b, m2_b) = a, b
    n = n_a + n_b
    if n == 0:
        return 0, 0.0, 0.0
    delta = mean_b - mean_a
    return n, mean_a + delta * n_b / n, m2_a + m2_b + delta * delta * n_a * n_b / n


def online_logsumexp(row):
    """One pass of chapter 18's online (max, sum) update, then m + log d. −∞ entries add nothing; a row with
    nothing above −∞ keeps m = −∞ and gives −∞ (log of an empty sum)."""
    m, d = -math.inf, 0.0
    for z in row:
        z = float(z)
        if z == -math.inf:
            continue                                             # e^−∞ = 0, and −∞ − (−∞) would be NaN
        new = max(m, z)
        d = d * math.exp(m - new) + math.exp(z - new)
        m = new
    return m + math.log(d) if d > 0 else -math.inf


PREDICT = """Exercise 1. 64 · 8 · 128 · 128 = 8.39 M floats of 4 bytes = 33.6 MB. The fused softmax reads them once and
writes them once: 67 MB, at 3.35 TB/s at least 20 µs. The unfused chain moves about 5.6x as much (section 4:
11.25 d floats' worth per row against 2 d), about 377 MB, at least 113 µs, plus six more kernel launches of a few µs
each.
Real kernels reach perhaps 80-90% of the peak bandwidth, so add that; FLOPs do not matter at all here."""
