"""Wrong shapes raise errors that name the shapes (or the key)."""
import numpy as np
import pytest

import minitensor as mt
from minitensor import nn


def test_matmul_shape_mismatch_names_shapes():
    with pytest.raises(ValueError, match=r"\(3, 4\) and \(5, 6\)"):
        mt.zeros((3, 4)) @ mt.zeros((5, 6))


def test_matmul_batch_mismatch_names_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3, 4\) and \(3, 4, 5\)"):
        mt.zeros((2, 3, 4)) @ mt.zeros((3, 4, 5))


def test_broadcast_failure_names_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(4,\)"):
        mt.zeros((2, 3)) + mt.zeros((4,))
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(4,\)"):
        mt.zeros((2, 3), requires_grad=True) * mt.zeros((4,))


def test_concat_mismatch_names_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3\), \(3, 3\)"):
        mt.concat([mt.zeros((2, 3)), mt.zeros((3, 3))], axis=1)


def test_load_state_dict_missing_and_misshaped_keys():
    model = nn.Sequential([nn.Linear(3, 4, rng=np.random.default_rng(0)), nn.Linear(4, 2, rng=np.random.default_rng(1))])
    state = model.state_dict()
    assert set(state) == {"0.weight", "0.bias", "1.weight", "1.bias"}
    broken = dict(state)
    del broken["1.bias"]
    with pytest.raises(KeyError, match=r"1\.bias"):
        model.load_state_dict(broken)
    broken = dict(state, **{"0.weight": np.zeros((4, 3), np.float32)})
    with pytest.raises(ValueError, match=r"'0\.weight' has shape \(4, 3\) in the state but \(3, 4\)"):
        model.load_state_dict(broken)
    with pytest.raises(KeyError, match="extra"):
        model.load_state_dict(dict(state, extra=np.zeros(1)))


def test_unknown_backend_lists_choices():
    with pytest.raises(ValueError, match="numpy"):
        mt.tensor([1.0], backend="tpu")
