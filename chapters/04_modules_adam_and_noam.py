# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 04 · Modules, dropout, initialisation, Adam and the Noam schedule
#
# > We used the Adam optimizer with β₁ = 0.9, β₂ = 0.98 and ε = 10⁻⁹. We varied
# > the learning rate over the course of training, according to the formula: (§5.3)
#
# $$\mathit{lrate} = d_{\text{model}}^{-0.5} \cdot \min\left(\mathit{step\_num}^{-0.5},\ \mathit{step\_num} \cdot \mathit{warmup\_steps}^{-1.5}\right) \tag{3}$$
#
# > This corresponds to increasing the learning rate linearly for the first
# > warmup_steps training steps, and decreasing it thereafter proportionally to
# > the inverse square root of the step number. We used warmup_steps = 4000. (§5.3)
#
# > We apply dropout to the output of each sub-layer, before it is added to the
# > sub-layer input and normalized. (§5.4)
#
# Before the model, the machinery that trains it: a `Module` that finds its
# parameters by itself, dropout, an initialiser (the paper does not say which
# one; we use Xavier-uniform like the reference implementations), Adam with the
# paper's constants, and the schedule of Eq. (3).
#
# The library code this chapter builds:
# [`minitensor/nn/layers.py`](../minitensor/nn/layers.py),
# [`minitensor/nn/init.py`](../minitensor/nn/init.py),
# [`minitensor/optim.py`](../minitensor/optim.py).

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from _common import FAST, calls_to, fails, finish, hold_training_path, one_cpu_thread, own_answer, show
from minitensor import nn, optim

THREADS = one_cpu_thread()
rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. A Module finds its own parameters
#
# A model is a tree of layers, each holding a few weight arrays. The trick that
# saves writing lists of weights by hand: a `Module` watches its own attribute
# assignments. Assigning a `Parameter` (a leaf Tensor that needs a gradient,
# chapter 02) or another `Module` to `self.something` registers it, so
# `named_parameters()` can walk the tree and name each weight by its attribute
# path (`hidden.weight`). Those names are what checkpoints store and what the
# optimiser keys its moments by. Here is the whole idea; `Linear` is
# y = xW + b with W of shape (in, out).

# %%
class MiniModule:
    """Registers Parameters and sub-modules by attribute assignment (the core of minitensor.nn.Module)."""

    def __init__(self):
        object.__setattr__(self, "_own", {})          # name -> Parameter or MiniModule, in assignment order

    def __setattr__(self, name, value):
        if isinstance(value, (nn.Parameter, MiniModule)):
            self._own[name] = value
        object.__setattr__(self, name, value)

    def named_parameters(self, prefix=""):
        for name, value in self._own.items():
            if isinstance(value, MiniModule):
                yield from value.named_parameters(f"{prefix}{name}.")
            else:
                yield prefix + name, value

    def __call__(self, *args):
        return self.forward(*args)


class MiniLinear(MiniModule):
    def __init__(self, d_in, d_out, rng):
        super().__init__()
        self.weight = nn.Parameter(nn.init.xavier_uniform((d_in, d_out), rng))   # (in, out), section 3
        self.bias = nn.Parameter(np.zeros(d_out, dtype=np.float32))

    def forward(self, x):
        return x @ self.weight + self.bias                            # (B, in) @ (in, out) + (out,) -> (B, out)


class MiniTwoLayer(MiniModule):
    def __init__(self, d_in, d_hidden, d_out, rng):
        super().__init__()
        self.hidden = MiniLinear(d_in, d_hidden, rng)
        self.out = MiniLinear(d_hidden, d_out, rng)

    def forward(self, x):
        return self.out(self.hidden(x).relu())


mini = MiniTwoLayer(3, 16, 1, np.random.default_rng(5))
print([(name, p.shape) for name, p in mini.named_parameters()])

# %% [markdown]
# The library's `minitensor.nn.Module` (minitensor/nn/module.py) is this plus
# the bookkeeping a real model needs: `train()`/`eval()` reaching every
# sub-module, `state_dict()`/`load_state_dict()`, `to()` another backend or
# dtype, `zero_grad()`. `nn.Linear` is `MiniLinear` as one fused Function. From
# here on every chapter uses the library's `nn.Module`, `nn.Linear` and
# `nn.Dropout` (next section), built here. The same network with them must have
# the same parameter names and, given the same weights, the same output.

# %%
class TwoLayer(nn.Module):
    def __init__(self, d_in, d_hidden, d_out, rng):
        super().__init__()
        self.hidden = nn.Linear(d_in, d_hidden, rng=rng)
        self.out = nn.Linear(d_hidden, d_out, rng=rng)
        self.drop = nn.Dropout(0.1, rng=rng)

    def forward(self, x):
        return self.out(self.drop(self.hidden(x).relu()))     # (B, d_in) -> (B, d_hidden) -> (B, d_out)


model = TwoLayer(3, 16, 1, rng)
model.load_state_dict({name: p.numpy() for name, p in mini.named_parameters()})
for name, p in model.named_parameters():
    print(f"{name:14s} {p.shape}")

# %% CHECK
names = [name for name, _ in model.named_parameters()]
assert names == ["hidden.weight", "hidden.bias", "out.weight", "out.bias"], names
assert names == [name for name, _ in mini.named_parameters()], "MiniModule names weights like nn.Module"
assert model.num_parameters() == 3 * 16 + 16 + 16 * 1 + 1, \
    "two Linear layers: 3·16 + 16 weights and biases in, 16·1 + 1 out"
model.eval()
assert not model.drop.training, "eval() must reach every sub-module"
xe = mt.tensor(rng.standard_normal((5, 3)))
mt.assert_close(model(xe), model(xe), name="eval mode is deterministic (no dropout)")
mt.assert_close(model(xe), mini(xe), name="library modules vs MiniModule, same weights", atol=1e-6)
model.train()

# %% [markdown]
# ## 2. Dropout, and why it divides by 1 − p
#
# §5.4 applies dropout with P_drop = 0.1: during training each activation is
# zeroed with probability p. At test time nothing is dropped, so the next layer
# would see inputs 1/(1 − p) times larger than the ones it was trained on,
# unless training compensates. *Inverted* dropout does: it divides the kept
# values by 1 − p, so that **E[dropout(x)] = x** and evaluation needs no
# change (`eval()` makes dropout the identity). The mask is drawn once per call
# and reused by backward: a dropped activation passes no gradient either.
# Ours takes its uniform draws u as an argument (an element is kept where
# u ≥ p), so that section 7 can hand it the very draws the library makes.

# %%
def dropout(x, p, u):
    """Inverted dropout on a Tensor, given uniform [0, 1) draws u: zero where u < p, scale the rest by 1/(1 − p)."""
    keep = u >= p                                                   # each element kept with probability 1 − p
    return x * mt.tensor(keep / (1.0 - p), dtype=x.dtype)


n_drop = 200_000
ones = mt.tensor(np.ones(n_drop, dtype=np.float32), requires_grad=True)
ours = dropout(ones, 0.1, np.random.default_rng(3).random(n_drop)).numpy()
library = nn.Dropout(0.1, rng=np.random.default_rng(4))
lib_out = library(ones)
lib_out.sum().backward()
library.eval()
print(f"mean of dropout(1): ours {ours.mean():.4f}, library {lib_out.numpy().mean():.4f} (both should be ≈ 1); "
      f"fraction zeroed {np.mean(lib_out.numpy() == 0):.4f}")

# %% CHECK
tolerance = 0.01                                                    # ~10 standard errors: √(p/(1−p)/n) ≈ 0.001
for who, out in [("ours", ours), ("nn.Dropout", lib_out.numpy())]:
    assert abs(out.mean() - 1.0) < tolerance, \
        f"{who}: E[dropout(x)] must equal x, got mean {out.mean():.4f} for x = 1 (is the 1/(1−p) rescale missing?)"
    assert abs(np.mean(out == 0) - 0.1) < tolerance, f"{who}: drops a fraction {np.mean(out == 0):.4f}, not p = 0.1"
    assert np.allclose(out[out != 0], 1 / 0.9), f"{who}: kept values are x/(1−p)"
mt.assert_close(ones.grad, lib_out.numpy(), name="backward reuses the mask and the scale")
mt.assert_close(library(ones), ones.numpy(), name="eval(): dropout is the identity")

# %% [markdown]
# ## 3. Initialisation keeps the signal's scale
#
# Xavier-uniform draws W from U(−a, a) with a = √(6 / (fan_in + fan_out)), so
# Var W = a²/3 = 2/(fan_in + fan_out). For a square layer, y = xW then has the
# variance of x: the signal neither explodes nor vanishes through a deep
# stack. We check the variance of the weights and of the output.

# %%
d = 512
w = nn.init.xavier_uniform((d, d), rng)
x_in = rng.standard_normal((2000, d))
y_out = x_in @ w
print(f"Var W = {w.var():.3e} (2/(2d) = {1 / d:.3e});  Var x = {x_in.var():.3f}, Var xW = {y_out.var():.3f}")

# %% CHECK
assert abs(w.var() / (2 / (d + d)) - 1) < 0.02, "Xavier-uniform variance is 2/(fan_in + fan_out)"
assert np.abs(w).max() <= np.sqrt(6 / (2 * d)), "Xavier-uniform is bounded by √(6/(fan_in+fan_out))"
assert abs(y_out.var() / x_in.var() - 1) < 0.05, "a square Xavier layer preserves the variance"

# %% [markdown]
# ## 4. Adam, from scratch and from the library
#
# Adam keeps, per parameter, a running mean of the gradient (m) and of its
# square (v), corrects both for starting at zero, and steps by
# lr · m̂ / (√v̂ + ε): each weight gets its own step size. The paper's β₂ = 0.98
# (the usual default is 0.999) makes v forget faster, which helps early in
# training when gradient scales change quickly.
#
# We write one step in NumPy and check that `minitensor.optim.Adam` (whose
# update is the backend's fused `adam_step` kernel) moves the parameters the
# same way over several steps with changing gradients.

# %%
def adam_numpy(p, g, m, v, step, lr, beta1=0.9, beta2=0.98, eps=1e-9):
    """One Adam step (§5.3 constants); returns new (p, m, v)."""
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    m_hat = m / (1 - beta1 ** step)          # bias correction: m and v start at 0
    v_hat = v / (1 - beta2 ** step)
    return p - lr * m_hat / (np.sqrt(v_hat) + eps), m, v


p0 = rng.standard_normal((4, 3)).astype(np.float32)
param = nn.Parameter(p0.copy())
adam = optim.Adam([param], lr=0.01, betas=(0.9, 0.98), eps=1e-9)
p_ref, m_ref, v_ref = p0.astype(np.float64), np.zeros((4, 3)), np.zeros((4, 3))
for step in range(1, 6):
    g = rng.standard_normal((4, 3)).astype(np.float32)
    param.grad = g
    adam.step()
    p_ref, m_ref, v_ref = adam_numpy(p_ref, g.astype(np.float64), m_ref, v_ref, step, lr=0.01)

# %% CHECK
mt.assert_close(param, p_ref.astype(np.float32), name="library Adam vs NumPy Adam after 5 steps")
assert np.abs(param.numpy() - p0).max() > 0.02, "5 steps of lr 0.01 must have moved the weights"
assert (adam.beta1, adam.beta2, adam.eps) == (0.9, 0.98, 1e-9), "the paper's Adam constants are the defaults"

# %% [markdown]
# ## 5. The Noam schedule, Eq. (3)
#
# lrate = d_model^−0.5 · min(step^−0.5, step · warmup^−1.5). The two terms are
# equal at step = warmup: before it the second (linear warm-up) is smaller,
# after it the first (1/√step decay). The peak is d_model^−0.5 · warmup^−0.5,
# about 7.0e-4 for the base model. Large early steps with Adam's still-noisy v
# estimate are what the warm-up avoids; post-norm Transformers (§3.1) are known
# to diverge without it.

# %%
def noam(step, d_model=512, warmup=4000):
    step = max(step, 1)
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)   # §5.3, Eq. (3)


schedule = optim.NoamSchedule(d_model=512, warmup=4000)
steps = np.arange(1, 20_001)
lrs = np.array([schedule(int(s)) for s in steps])

fig, ax = plt.subplots(figsize=(6, 3.5))
for d_model, warmup in [(512, 4000), (512, 8000), (1024, 4000)]:
    curve = optim.NoamSchedule(d_model, warmup)
    ax.plot(steps, [curve(int(s)) for s in steps], label=f"d_model={d_model}, warmup={warmup}")
ax.set_xlabel("step")
ax.set_ylabel("learning rate")
ax.set_title("§5.3 Eq. (3)")
ax.legend()
show(fig, "04_noam_schedule")
print(f"peak lr {lrs.max():.3e} at step {steps[lrs.argmax()]}")

# %% CHECK
assert steps[lrs.argmax()] == 4000, f"the peak must be at warmup_steps, got step {steps[lrs.argmax()]}"
assert np.isclose(lrs.max(), 512 ** -0.5 * 4000 ** -0.5), "peak value d_model^-0.5 · warmup^-0.5"
assert all(np.isclose(schedule(s), noam(s)) for s in (1, 10, 3999, 4000, 4001, 100_000)), "library vs Eq. (3)"
assert np.isclose(schedule(2000), schedule(4000) / 2), "linear warm-up: half the steps, half the rate"
assert np.isclose(schedule(16000), schedule(4000) / 2), "after warm-up: 4x the steps, half the rate"

# %% [markdown]
# ### Which step's rate does Adam apply?
#
# Eq. (3) is a function of step_num, and "step 1" must mean the first update:
# an optimiser that reads the rate before it counts the update applies
# lrate(t − 1) at update t. Nothing downstream notices (training still
# works, just a step late), so we measure the rate Adam really applies. With
# a **constant** gradient g, the moments are m_t = (1 − β₁ᵗ)·g and
# v_t = (1 − β₂ᵗ)·g², so the bias corrections give m̂ = g and v̂ = g² exactly
# and update t moves each weight by −lr_t · g/(|g| + ε): the applied rate is
# the step divided by g/(|g| + ε). We run 4000 updates of the Numba kernels
# (the path every config trains with) and read it off at updates 1, 2 and 4000.

# %%
def applied_rates(updates, backend, d_model=512, warmup=4000):
    """The rate Adam applied at each of `updates`, read off the weights' steps under a constant gradient."""
    g = np.array([0.5, -2.0, 3e-3])
    weight = nn.Parameter(np.zeros(3), backend=backend, dtype="float64")
    constant_adam = optim.Adam([weight], lr=optim.NoamSchedule(d_model, warmup), eps=1e-9)
    rates = {}
    for t in range(1, max(updates) + 1):
        before = weight.numpy().copy()
        weight.grad = weight.backend.asarray(g)
        constant_adam.step()
        if t in updates:
            rates[t] = (before - weight.numpy()) / (g / (np.abs(g) + 1e-9))    # one rate per weight, all equal
    return rates


measured = applied_rates((1, 2, 4000), "numba")
print({t: f"{r[0]:.6e}" for t, r in measured.items()}, {t: f"{noam(t):.6e}" for t in measured})

# %% CHECK
for t, rates in measured.items():
    mt.assert_close(rates, np.full(3, noam(t)), name=f"the rate Adam applies at update {t} must be Eq. (3) at step {t} "
                                                     f"(read after counting the update, bias-corrected)")

# %% [markdown]
# ## 6. Putting it together
#
# A small regression fitted with Adam under a (short) Noam schedule: the loss
# must fall well below its starting value. `zero_grad` before each backward,
# because gradients accumulate (chapter 02).

# %%
n_steps = 150 if FAST else 600
fit_rng = np.random.default_rng(1)
X = fit_rng.uniform(-2, 2, size=(256, 3))
Y = np.sin(X[:, :1]) + 0.5 * X[:, 1:2] * X[:, 2:3]                  # (256, 1) a smooth target
net = TwoLayer(3, 32, 1, fit_rng)
net.drop.p = 0.0                                                   # regression: no dropout
opt = optim.Adam(net.named_parameters(), lr=optim.NoamSchedule(d_model=32, warmup=50, factor=2.0))
xs, ys = mt.tensor(X), mt.tensor(Y)
losses = []
for _ in range(n_steps):
    opt.zero_grad()
    diff = net(xs) - ys                                            # (256, 1)
    loss = (diff * diff).mean()                                    # mean squared error
    loss.backward()
    opt.step()
    losses.append(loss.item())
print(f"loss {losses[0]:.3f} -> {losses[-1]:.4f} after {n_steps} steps")

# %% CHECK
assert losses[-1] < 0.2 * losses[0], f"training must reduce the loss (from {losses[0]:.3f} to {losses[-1]:.3f})"
assert opt.step_count == n_steps, "one optimizer step per update"

# %% [markdown]
# ## 7. The path that trains
#
# Every config trains with the **Numba** backend: `nn.Linear` as one fused
# `Linear` Function, dropout as a fused `Dropout` Function whose compiled
# kernel applies the mask, Adam as one compiled `adam_step` over a flat
# buffer. Sections 1-4 compared our versions with the library on NumPy's
# reference kernels; a bug in the compiled ones would pass all of that and
# still train a wrong model. So we hold both paths to our own code in float64:
# outputs and the gradient of every input through a random cotangent r
# (chapter 03), `hold_training_path` in `chapters/_common.py`. The library's
# dropout draws u from a seed (so backward regenerates the mask instead of
# storing it): `backend.uniform(seed, shape, float32)`, which we hand to ours.

# %%
x_path, w_path, b_path = rng.standard_normal((5, 3)), rng.standard_normal((3, 4)), rng.standard_normal(4)
r_linear = rng.standard_normal((5, 4))
linear_inputs = {"x": x_path, "W": w_path, "b": b_path}
p_path, seed_path = 0.3, 1234
u_path = mt.get_backend("numba").uniform(seed_path, (6, 7), np.float32)     # the draws behind seed 1234
x_drop, r_drop = rng.standard_normal((6, 7)), rng.standard_normal((6, 7))
steps_grads = [rng.standard_normal((4, 3)) for _ in range(5)]


def adam_on(backend):
    """Five library Adam updates in float64 on `backend`, with the gradients of steps_grads."""
    weight = nn.Parameter(p0, backend=backend, dtype="float64")
    library_adam = optim.Adam([weight], lr=0.01)
    for g_t in steps_grads:
        weight.grad = weight.backend.asarray(g_t)
        library_adam.step()
    return weight.numpy()


p_own, m_own, v_own = p0.astype(np.float64), np.zeros((4, 3)), np.zeros((4, 3))
for t, g_t in enumerate(steps_grads, start=1):
    p_own, m_own, v_own = adam_numpy(p_own, g_t, m_own, v_own, t, lr=0.01)

# %% CHECK
hold_training_path("nn.Linear (xW + b)", lambda x, w, b: mt.functions.Linear.apply(x, w, b), linear_inputs,
                   own_answer(lambda x, w, b: x @ w + b, linear_inputs, r_linear), r_linear)
hold_training_path("dropout (p = 0.3)", lambda x: mt.functions.Dropout.apply(x, p=p_path, seed=seed_path),
                   {"x": x_drop}, own_answer(lambda x: dropout(x, p_path, u_path), {"x": x_drop}, r_drop), r_drop,
                   backends=("numpy", "numba"))            # a GPU draws its own u (tests/minitensor/kernels hold its kernel)
for backend in ("numpy", "numba") + (("cupy",) if mt.available("cupy") else ()):
    mt.assert_close(adam_on(backend), p_own, name=f"Adam, the {backend} adam_step kernel: weights after 5 updates "
                                                  f"vs the chapter's own (bias-corrected) Adam")

# %% [markdown]
# ## Summary
# - Modules register parameters by attribute assignment; names double as checkpoint keys.
# - Inverted dropout zeroes with probability p and divides the rest by 1 − p, so E[dropout(x)] = x and eval() changes nothing else; Xavier-uniform keeps activations at unit scale.
# - Adam with β₂ = 0.98, ε = 1e-9 and the Eq. (3) schedule: linear warm-up to d_model^−0.5·warmup^−0.5, then 1/√step.
#
# ## Exercises
# 1. **Predict, then run.** For the big model (d_model = 1024, warmup 4000), what is the peak learning
#    rate, and at which steps is the rate half the peak? Check with `optim.NoamSchedule`.
#    (Answer key: `PREDICT` in `chapters/solutions/04_modules_adam_and_noam.py`.)
# 2. Adam's very first step does not depend on how large the gradient is. Work out why from the bias
#    correction, then write `first_adam_update(g, lr, eps)`: the change p₁ − p₀ after one step from
#    m = v = 0, as a closed form in g (no moments). `check_first_adam_update(fn)` compares it with the library.
# 3. Write `warmup_for_peak(d_model, peak_lr)`: the warmup_steps at which Eq. (3) peaks at `peak_lr`
#    (invert the formula; round to a whole step). `check_warmup_for_peak(fn)` tests it against `NoamSchedule`.
# 4. Inverted dropout keeps the mean; what does it do to the variance? Write `dropout_variance(x, p)`: the
#    variance of one output element for input value x. `check_dropout_variance(fn)` measures it on `nn.Dropout`.

# %%
def check_first_adam_update(first_adam_update) -> None:
    """Exercise 2: one library Adam step, from gradients of very different scales (float32: rtol 1e-5), drawn
    afresh each call; worked out from the update rule, not by running Adam."""
    for scale in (1e3, 1.0, 1e-4, 1e-10):
        g = (np.random.default_rng().standard_normal((3, 4)) * scale).astype(np.float32)
        with calls_to(optim.Adam.step) as calls:
            got = np.asarray(first_adam_update(g.astype(np.float64), 0.01, 1e-9), dtype=np.float64)
        assert not calls, "work the first update out from Adam's rule: the answer ran the library's Adam"
        param = nn.Parameter(np.zeros((3, 4), dtype=np.float32))
        param.grad = g
        optim.Adam([param], lr=0.01).step()
        expected = param.numpy().astype(np.float64)
        mt.assert_close(got, expected, name=f"first step for |g| ~ {scale:g}", rtol=1e-4, atol=1e-12)


def check_warmup_for_peak(warmup_for_peak) -> None:
    """Exercise 3: the schedule built with your warmup must peak at the asked rate, at that step, for sizes and
    rates drawn afresh each call; solved from the schedule's formula, not by searching the library's schedule."""
    check_rng = np.random.default_rng()
    for d_model, steps in zip(2 ** check_rng.integers(5, 12, size=4), check_rng.uniform(200, 20_000, size=4)):
        d_model, peak = int(d_model), float((d_model * steps) ** -0.5)     # a peak some warm-up reaches
        with calls_to(optim.NoamSchedule.__call__) as calls:
            warmup = int(warmup_for_peak(d_model, peak))
        assert not calls, "solve the schedule's formula for the warm-up: the answer ran the library's schedule"
        schedule = optim.NoamSchedule(d_model, warmup)
        assert abs(schedule(warmup) / peak - 1) < 0.01, \
            f"d_model {d_model}: warmup {warmup} peaks at {schedule(warmup):.3e}, not {peak:.3e}"


def check_dropout_variance(dropout_variance) -> None:
    """Exercise 4: against the measured variance of the library's dropout (200,000 draws per setting); the
    answer is a formula, not a measurement of the library's dropout."""
    for x, p in [(1.0, 0.1), (3.0, 0.3), (-2.0, 0.5)]:
        layer = nn.Dropout(p, rng=np.random.default_rng(int(10 * p)))
        measured = layer(mt.tensor(np.full(200_000, x, dtype=np.float32))).numpy().var()
        with calls_to(nn.Dropout.forward) as calls:
            expected = float(dropout_variance(x, p))
        assert not calls, "work the variance out: the answer measured the library's dropout"
        assert abs(measured / expected - 1) < 0.05, f"x = {x}, p = {p}: measured {measured:.4f}, yours {expected:.4f}"


# %% CHECK the checks: a wrong answer must fail them
assert fails(check_first_adam_update, lambda g, lr, eps: -lr * g), "accepted an SGD step"


def _by_running_adam(g, lr, eps):                                   # the right numbers, by the library's Adam
    param = nn.Parameter(np.zeros(g.shape))
    param.grad = g.astype(np.float32)
    optim.Adam([param], lr=lr, eps=eps).step()
    return param.numpy()


assert fails(check_first_adam_update, _by_running_adam), "check_first_adam_update accepted the library's Adam"
assert fails(check_warmup_for_peak, lambda d_model, peak: round(1 / (d_model * peak))), "accepted a wrong inverse"
assert fails(check_dropout_variance, lambda x, p: x * x * p), "accepted the variance without the rescale"


def _warmup_by_search(d_model, peak):                               # the right warm-up, found by bisecting the schedule
    low, high = 1, 10**8
    while low < high:
        mid = (low + high) // 2
        low, high = (mid + 1, high) if optim.NoamSchedule(d_model, mid)(mid) > peak else (low, mid)
    return low


def _variance_by_measuring(x, p):                                   # the right number to ~1%, measured
    return nn.Dropout(p)(mt.tensor(np.full(100_000, x))).numpy().var()


assert fails(check_warmup_for_peak, _warmup_by_search), "check_warmup_for_peak accepted a search of the schedule"
assert fails(check_dropout_variance, _variance_by_measuring), "check_dropout_variance accepted a measurement"

# %%
finish("04_modules_adam_and_noam", {check_first_adam_update: "first_adam_update",
                                    check_warmup_for_peak: "warmup_for_peak",
                                    check_dropout_variance: "dropout_variance"})
