"""transformer/masks.py: padding and subsequent (causal) masks, True = blocked (§3.2.3)."""
import numpy as np

from transformer.masks import padding_mask, subsequent_mask


def test_padding_mask_blocks_pad_keys():
    ids = np.array([[5, 6, 0, 0], [7, 0, 8, 9]])
    mask = padding_mask(ids, pad_id=0)
    assert mask.shape == (2, 1, 1, 4) and mask.dtype == bool
    np.testing.assert_array_equal(mask[:, 0, 0], [[False, False, True, True], [False, True, False, False]])


def test_subsequent_mask_blocks_later_keys():
    mask = subsequent_mask(4)
    assert mask.shape == (1, 1, 4, 4) and mask.dtype == bool
    np.testing.assert_array_equal(mask[0, 0], np.triu(np.ones((4, 4), dtype=bool), k=1))


def test_subsequent_mask_with_past_positions():
    mask = subsequent_mask(2, past=3)                    # queries are positions 3 and 4
    assert mask.shape == (1, 1, 2, 5)
    np.testing.assert_array_equal(mask[0, 0], [[0, 0, 0, 0, 1], [0, 0, 0, 0, 0]])
    full = subsequent_mask(5)
    np.testing.assert_array_equal(mask[0, 0], full[0, 0, 3:])
