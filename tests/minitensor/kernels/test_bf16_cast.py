"""bf16_cast: the reference against bit patterns worked out by hand (ties to even, the carry into
the exponent, inf, NaN, subnormals, -0); every Numba version and every backend against the
reference; the round trip float32 -> bf16 -> float32 within half a bf16 step.

Shapes: any (flat, 2-D, empty).
"""
import numpy as np
import pytest

import minitensor as mt
from minitensor.dtypes import BF16
from minitensor.kernels.bf16_cast import numba_cpu
from minitensor.kernels.bf16_cast.reference import bf16_cast_ref, bf16_to_float32, float_to_bf16

# (float32 bits, bf16 bits): each line one rule of round-to-nearest-even on the top 16 bits
CASES = [
    (0x3F800000, 0x3F80),  # 1.0: exact
    (0x3F808000, 0x3F80),  # halfway, even below: stays
    (0x3F818000, 0x3F82),  # halfway, odd below: up to even
    (0x3F808001, 0x3F81),  # just above halfway: up
    (0x3F807FFF, 0x3F80),  # just below halfway: down
    (0x3FFFFFFF, 0x4000),  # the carry out of the mantissa bumps the exponent: 2.0
    (0x7F7FFFFF, 0x7F80),  # the largest float32 rounds to +inf
    (0x7F800000, 0x7F80),  # +inf
    (0xFF800000, 0xFF80),  # -inf
    (0x80000000, 0x8000),  # -0.0 keeps its sign
    (0x00000001, 0x0000),  # the smallest subnormal rounds to 0
    (0x00018000, 0x0002),  # a subnormal halfway, odd below: up to even
    (0x7FC00000, 0x7FC0),  # quiet NaN
    (0x7F800001, 0x7FC0),  # signalling NaN with a low payload: stays NaN (plain rounding gives inf)
    (0xFFFFFFFF, 0xFFFF),  # NaN with every bit set: no overflow, stays NaN
]


def test_reference_rounds_each_case_to_the_expected_bits():
    f32_bits = np.array([c[0] for c in CASES], dtype=np.uint32)
    got = float_to_bf16(f32_bits.view(np.float32))
    want = np.array([c[1] for c in CASES], dtype=BF16)
    bad = [(hex(a), hex(g), hex(w)) for a, g, w in zip(f32_bits, got, want) if g != w]
    assert not bad, f"(float32 bits, got, want): {bad}"


def test_reference_widening_is_exact_and_round_trip_is_within_half_a_step():
    bits = np.arange(0, 2**16, dtype=np.uint32).astype(BF16)             # every bf16 value
    wide = bf16_to_float32(bits)
    assert (wide.view(np.uint32) >> 16 == bits).all() and (wide.view(np.uint32) & 0xFFFF == 0).all()
    same = ~np.isnan(wide)
    assert (float_to_bf16(wide)[same] == bits[same]).all(), "bf16 -> float32 -> bf16 must be the identity"
    x = np.random.default_rng(0).standard_normal(10_000).astype(np.float32) * 1e3
    back = bf16_to_float32(float_to_bf16(x))
    assert (np.abs(back - x) <= np.abs(x) * 2.0**-8).all()                 # half a step of 8 significant bits


def test_reference_cast_checks_its_dtypes():
    assert bf16_cast_ref(np.array([1.5], np.float64), BF16).dtype == BF16
    assert bf16_cast_ref(np.array([0x3FC0], BF16), np.float64)[0] == 1.5
    with pytest.raises(TypeError):
        bf16_cast_ref(np.array([1], np.int32), BF16)
    with pytest.raises(TypeError):
        bf16_cast_ref(np.array([1.0], np.float32), np.float64)              # neither side is bf16


def _inputs(dtype, shape, rng):
    x = (rng.standard_normal(shape) * 100).astype(dtype)
    with np.errstate(over="ignore"):                                       # 3.4e38 is inf in float16
        specials = np.array([np.inf, -np.inf, np.nan, -0.0, 1e-40, 3.4e38], dtype=np.float64).astype(dtype)
    x.reshape(-1)[:min(x.size, specials.size)] = specials[:x.size]
    return x


@pytest.mark.parametrize("version", sorted(numba_cpu.VERSIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(0,), (1,), (7, 33), (4097,)])
def test_numba_matches_reference_both_ways(monkeypatch, version, dtype, shape):
    monkeypatch.setattr(numba_cpu, "DEFAULT", version)
    x = _inputs(dtype, shape, np.random.default_rng(1))
    bits = numba_cpu.bf16_cast(x, BF16)
    want = bf16_cast_ref(x, BF16)
    assert bits.dtype == BF16 and bits.shape == shape
    np.testing.assert_array_equal(bits, want)
    back = numba_cpu.bf16_cast(want, dtype)
    assert back.dtype == dtype
    np.testing.assert_array_equal(back, bf16_cast_ref(want, dtype))


def test_every_backend_matches_the_reference(backend):
    b = mt.get_backend(backend)
    x = _inputs(np.float32, (5, 9), np.random.default_rng(2))
    bits = b.to_numpy(b.bf16_cast(b.asarray(x), BF16))
    np.testing.assert_array_equal(bits, bf16_cast_ref(x, BF16))
    np.testing.assert_array_equal(b.to_numpy(b.bf16_cast(b.asarray(bits), np.float32)), bf16_to_float32(bits))
