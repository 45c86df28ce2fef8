"""transformer/positional.py: the layout of §3.5's sinusoids (sin on even dimensions, cos on odd) and the offset."""
import numpy as np

import minitensor as mt
from transformer.positional import PositionalEncoding, sinusoid_table


def test_sinusoid_table_puts_sin_on_even_and_cos_on_odd_dimensions():
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))."""
    L, D = 50, 12
    table = sinusoid_table(L, D)
    pos, i = np.arange(L)[:, None], np.arange(D // 2)[None, :]
    angle = pos / 10000.0 ** (2 * i / D)                       # computed independently of the module
    mt.assert_close(table[:, 0::2], np.sin(angle).astype(np.float32), name="even dimensions 2i: sin")
    mt.assert_close(table[:, 1::2], np.cos(angle).astype(np.float32), name="odd dimensions 2i+1: cos")
    np.testing.assert_array_equal(table[0], np.tile([0.0, 1.0], D // 2).astype(np.float32),
                                  err_msg="PE(0) = (sin 0, cos 0, ...) = (0, 1, 0, 1, ...)")
    assert table[1, 0] == np.float32(np.sin(1.0)) and table[1, 1] == np.float32(np.cos(1.0)), \
        "dimension pair 0 turns at 1 radian per position (wavelength 2π)"


def test_positional_encoding_adds_the_rows_from_the_offset():
    L, D = 20, 8
    module = PositionalEncoding(D, L, "sinusoidal", np.random.default_rng(0))
    x = np.random.default_rng(1).standard_normal((2, 5, D)).astype(np.float32)
    got = module(mt.tensor(x), offset=3).numpy()
    mt.assert_close(got, x + sinusoid_table(L, D)[3:8], name="x + PE[3:8]")
