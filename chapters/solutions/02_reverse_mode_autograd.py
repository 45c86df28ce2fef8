"""Solutions to chapter 02's exercises (checked by `check_value_pow`, `check_sigmoid`)."""
from minitensor import Function


def value_pow(a, k: float):
    """a ** k for a scalar-engine Value and a constant k: d(a^k)/da = k·a^(k-1)."""
    out = type(a)(a.data ** k, (a,))

    def _backward():
        a.grad += k * a.data ** (k - 1) * out.grad     # += : a may be used elsewhere too

    out._backward = _backward
    return out


class Sigmoid(Function):
    """f = 1/(1 + e^-x);  df/dx = f(1 - f), computed from the saved output."""

    @staticmethod
    def forward(ctx, x):
        y = 1.0 / (1.0 + ctx.backend.xp.exp(-x))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_out):
        (y,) = ctx.saved
        return grad_out * y * (1.0 - y)


PREDICT = """Exercise 1. d loss/dw = (3, 3). Leaves accumulate: the second backward adds (3, 3) to the
(3, 3) already there, so w.grad = (6, 6). That is why a training loop calls zero_grad() before
every backward, and why gradient accumulation over micro-batches (chapter 16) is just "do not clear"."""
