# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 04 · Modules, initialisation, Adam and the Noam schedule
#
# > "We used the Adam optimizer with β₁ = 0.9, β₂ = 0.98 and ε = 10⁻⁹. We varied
# > the learning rate over the course of training, according to the formula:
# > lrate = d_model^−0.5 · min(step_num^−0.5, step_num · warmup_steps^−1.5).
# > This corresponds to increasing the learning rate linearly for the first
# > warmup_steps training steps, and decreasing it thereafter proportionally to
# > the inverse square root of the step number. We used warmup_steps = 4000."
# > (§5.3, Eq. (3))
#
# Before the model, the machinery that trains it: a `Module` that finds its
# parameters by itself, an initialiser (the paper does not say which one; we
# use Xavier-uniform like the reference implementations), Adam with the
# paper's constants, and the schedule of Eq. (3).

# %%
import contextlib
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from minitensor import nn, optim
from train.threads import cpu_threads

FAST = "--fast" in sys.argv
CHECK_SOLUTIONS = "--check-solutions" in sys.argv
HERE = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
OUT = HERE / "_out"
OUT.mkdir(exist_ok=True)
THREADS = contextlib.ExitStack()       # held until the script ends
THREADS.enter_context(cpu_threads(1))  # tiny matrices: extra BLAS/Numba threads only add overhead
rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. Modules find their own parameters
#
# A `Module` registers every `Parameter` and sub-`Module` assigned to one of its
# attributes, so `named_parameters()` walks the tree and names each weight by
# its attribute path. Those names are what checkpoints store and what the
# optimiser keys its moments by. Dropout is a module too; `train()`/`eval()`
# switch it on and off everywhere at once.

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
for name, p in model.named_parameters():
    print(f"{name:14s} {p.shape}")

# %% CHECK
names = [name for name, _ in model.named_parameters()]
assert names == ["hidden.weight", "hidden.bias", "out.weight", "out.bias"], names
assert model.num_parameters() == 3 * 16 + 16 + 16 * 1 + 1
model.eval()
assert not model.drop.training, "eval() must reach every sub-module"
xe = mt.tensor(rng.standard_normal((5, 3)))
mt.assert_close(model(xe), model(xe), name="eval mode is deterministic (no dropout)")
model.train()

# %% [markdown]
# ## 2. Initialisation keeps the signal's scale
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
# ## 3. Adam, from scratch and from the library
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
# ## 4. The Noam schedule, Eq. (3)
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
fig.tight_layout()
fig.savefig(OUT / "04_noam_schedule.png", dpi=100)
plt.close(fig)
print(f"peak lr {lrs.max():.3e} at step {steps[lrs.argmax()]}")

# %% CHECK
assert steps[lrs.argmax()] == 4000, f"the peak must be at warmup_steps, got step {steps[lrs.argmax()]}"
assert np.isclose(lrs.max(), 512 ** -0.5 * 4000 ** -0.5), "peak value d_model^-0.5 · warmup^-0.5"
assert all(np.isclose(schedule(s), noam(s)) for s in (1, 10, 3999, 4000, 4001, 100_000)), "library vs Eq. (3)"
assert np.isclose(schedule(2000), schedule(4000) / 2), "linear warm-up: half the steps, half the rate"
assert np.isclose(schedule(16000), schedule(4000) / 2), "after warm-up: 4x the steps, half the rate"

# %% [markdown]
# ## 5. Putting it together
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
assert opt.step_count == n_steps

# %% [markdown]
# ## Summary
# - Modules register parameters by attribute assignment; names double as checkpoint keys.
# - Xavier-uniform (the paper is silent; we follow the reference code) keeps activations at unit scale.
# - Adam with β₂ = 0.98, ε = 1e-9 and the Eq. (3) schedule: linear warm-up to d_model^−0.5·warmup^−0.5, then 1/√step.
#
# ## Exercises
# 1. **Predict, then run.** For the big model (d_model = 1024, warmup 4000), what is the peak learning
#    rate, and at which step does the rate fall back to half the peak? Check with `optim.NoamSchedule`.
# 2. Write `noam_lr(step, d_model, warmup)` implementing Eq. (3) (step 0 counts as step 1).
#    `check_noam_lr(fn)` tests it.
# 3. Write `adam_step(p, g, m, v, step, lr, beta1, beta2, eps)` returning `(p, m, v)` after one
#    bias-corrected Adam step. `check_adam_step(fn)` compares it with `minitensor.optim.Adam`.

# %%
def check_noam_lr(noam_lr) -> None:
    """Exercise 2: against the library schedule at many steps and settings."""
    for d_model, warmup in [(512, 4000), (1024, 4000), (64, 100)]:
        lib = optim.NoamSchedule(d_model, warmup)
        for step in (0, 1, 2, warmup // 2, warmup - 1, warmup, warmup + 1, 10 * warmup):
            assert np.isclose(noam_lr(step, d_model, warmup), lib(step), rtol=1e-9), \
                f"step {step}, d_model {d_model}, warmup {warmup}"


def check_adam_step(adam_step) -> None:
    """Exercise 3: five steps against the library optimiser (paper constants and a non-default lr)."""
    check_rng = np.random.default_rng(7)
    start = check_rng.standard_normal((3, 2)).astype(np.float32)
    lib_param = nn.Parameter(start.copy())
    lib = optim.Adam([lib_param], lr=0.05)
    p, m, v = start.astype(np.float64), np.zeros((3, 2)), np.zeros((3, 2))
    for step in range(1, 6):
        g = check_rng.standard_normal((3, 2)).astype(np.float32) * step
        lib_param.grad = g
        lib.step()
        p, m, v = adam_step(p, g.astype(np.float64), m, v, step, 0.05, 0.9, 0.98, 1e-9)
    mt.assert_close(np.asarray(p, dtype=np.float32), lib_param, name="adam_step after 5 steps")


# %% CHECK the checks: a wrong answer must fail them
def _fails(check, wrong) -> bool:
    try:
        check(wrong)
    except AssertionError:
        return True
    return False


def _adam_no_bias_correction(p, g, m, v, step, lr, b1, b2, eps):
    m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
    return p - lr * m / (np.sqrt(v) + eps), m, v


assert _fails(check_noam_lr, lambda step, d_model, warmup: d_model ** -0.5 * min(max(step, 1) ** -0.5, 1.0)), \
    "check_noam_lr accepted a schedule without warm-up"
assert _fails(check_adam_step, _adam_no_bias_correction), "check_adam_step accepted Adam without bias correction"

# %%
if CHECK_SOLUTIONS:
    import importlib
    solutions = importlib.import_module("solutions.04_modules_adam_and_noam")
    check_noam_lr(solutions.noam_lr)
    check_adam_step(solutions.adam_step)
    print("solutions OK")
print("chapter 04 OK")
