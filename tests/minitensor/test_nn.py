"""Modules, layers and a small MLP that must actually learn."""
import numpy as np
import pytest

import minitensor as mt
from minitensor import nn, optim


class MLP(nn.Module):
    def __init__(self, sizes, rng):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(a, b, rng=rng) for a, b in zip(sizes, sizes[1:])])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = x.tanh()
        return x


def train_classifier(x, y, sizes, steps, lr, seed=0):
    model = MLP(sizes, np.random.default_rng(seed))
    opt = optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
    from minitensor.functions import CrossEntropy
    xt, yt = mt.tensor(x), np.asarray(y)
    for _ in range(steps):
        loss, _ = CrossEntropy.apply(model(xt), targets=yt)
        opt.zero_grad()
        loss.mean().backward()
        opt.step()
    with mt.no_grad():
        return (model(xt).numpy().argmax(-1) == y).mean()


def test_mlp_learns_xor():
    x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float32)
    y = np.array([0, 1, 1, 0])
    assert train_classifier(x, y, [2, 8, 2], steps=300, lr=0.05) == 1.0


def two_moons(n, rng, noise=0.1):
    t = rng.uniform(0, np.pi, n)
    upper = np.stack([np.cos(t), np.sin(t)], 1)
    lower = np.stack([1 - np.cos(t), 0.5 - np.sin(t)], 1)
    x = np.concatenate([upper, lower]) + rng.normal(0, noise, (2 * n, 2))
    return x.astype(np.float32), np.repeat([0, 1], n)


def test_mlp_learns_two_moons():
    x, y = two_moons(100, np.random.default_rng(0))
    assert train_classifier(x, y, [2, 32, 32, 2], steps=600, lr=0.01) == 1.0


def test_parameters_register_by_attribute_with_dotted_names():
    model = MLP([3, 4, 2], np.random.default_rng(0))
    names = [n for n, _ in model.named_parameters()]
    assert names == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]
    assert model.num_parameters() == 3 * 4 + 4 + 4 * 2 + 2


def test_state_dict_round_trip_and_copy_semantics():
    a, b = MLP([3, 4, 2], np.random.default_rng(0)), MLP([3, 4, 2], np.random.default_rng(1))
    state = a.state_dict()
    b.load_state_dict(state)
    x = mt.tensor(np.random.default_rng(2).standard_normal((5, 3)))
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    state["layers.0.weight"][:] = 0                     # the state is a copy: the model is unchanged
    assert np.abs(a.layers[0].weight.numpy()).sum() > 0


def test_train_eval_switches_dropout():
    drop = nn.Dropout(0.5, rng=np.random.default_rng(0))
    x = mt.ones((100,))
    assert (drop(x).numpy() == 0).any()
    drop.eval()
    np.testing.assert_array_equal(drop(x).numpy(), 1.0)
    model = nn.Sequential([nn.Linear(2, 2), nn.Dropout(0.1)])
    model.eval()
    assert all(not m.training for _, m in model.named_modules())


def test_dropout_replays_after_restoring_rng_state():
    rng = np.random.default_rng(5)
    drop = nn.Dropout(0.5, rng=rng)
    state = rng.bit_generator.state
    first = drop(mt.ones((50,))).numpy()
    rng.bit_generator.state = state
    np.testing.assert_array_equal(drop(mt.ones((50,))).numpy(), first)


def test_xavier_uniform_bound_and_variance():
    w = nn.init.xavier_uniform((400, 600), np.random.default_rng(0))
    bound = np.sqrt(6 / 1000)
    assert np.abs(w).max() <= bound
    assert w.var() == pytest.approx(2 / 1000, rel=0.05)


def test_embedding_and_layernorm_layers():
    emb = nn.Embedding(10, 4, rng=np.random.default_rng(0))
    out = emb(np.array([[1, 2], [9, 1]]))
    assert out.shape == (2, 2, 4)
    np.testing.assert_array_equal(out.numpy()[0, 0], emb.weight.numpy()[1])
    with pytest.raises(IndexError, match=r"\[0, 10\)"):
        emb(np.array([10]))
    ln = nn.LayerNorm(4)
    y = ln(out).numpy()
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-6)
    np.testing.assert_allclose(y.std(-1), 1, atol=1e-3)
