"""Solutions to chapter 11's exercises (checked by `check_restricted_path_length`, `check_dilated_path_length`)
and the answer key PREDICT."""
import math


def restricted_path_length(n: int, r: int) -> int:
    """Each hop moves a signal at most r/2 positions, so the farthest pair (n − 1 apart) needs ⌈(n − 1)/(r/2)⌉
    hops: O(n/r), as Table 1 says."""
    return math.ceil((n - 1) / (r // 2))


def dilated_path_length(n: int, k: int) -> int:
    """After L layers the last output reads offsets Σ m_ℓ k^ℓ (m_ℓ in 0..k−1) = 0..k^L − 1: every input once
    k^L ≥ n, so L = ⌈log_k n⌉ (counted with integers: floating-point logs are off at exact powers)."""
    layers, reach = 0, 1
    while reach < n:
        reach *= k
        layers += 1
    return layers


PREDICT = """Exercise 1. The ratio is (2n·d²)/(2n²·d) = d/n = 512/30 ≈ 17: self-attention needs about 17 times
fewer multiply-adds per layer. They are equal at n = d = 512; above 512 tokens attention costs more (and its
n × n weights start to dominate memory), which is why §4 mentions restricting it to a neighbourhood."""
