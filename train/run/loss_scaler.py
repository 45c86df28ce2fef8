"""Dynamic loss scaling for mixed-precision (fp16) training.

The paper trained in fp32 on P100s (§5.2); fp16 arithmetic is a DEVIATION(§5.2)
that modern GPUs need for speed. fp16 gradients below ~6e-8 flush to zero, so
the loss is multiplied by a large `scale` before backward, and the fp32 master
gradients are divided by it before the optimizer step. If any gradient
overflowed (inf/nan), the step is skipped and the scale halved; after
`growth_interval` good steps in a row the scale doubles again.

The unscaling and the finiteness check work on the optimizer's one flat
gradient: one multiply, one reduction and one host read per step, not one per parameter.
"""

import math

import numpy as np


class LossScaleOverflowError(RuntimeError):
    """Too many overflowing steps in a row: the run has diverged or the model is broken."""


class DynamicLossScaler:
    def __init__(self, init_scale: float = 2.0 ** 16, growth_interval: int = 2000,
                 max_consecutive_overflows: int = 30, min_scale: float = 1.0):
        self.scale = float(init_scale)
        self.growth_interval = growth_interval
        self.max_consecutive_overflows = max_consecutive_overflows
        self.min_scale = min_scale
        self.good_steps = 0  # finite steps since the last overflow or growth
        self.consecutive_overflows = 0
        self.skipped_steps = 0  # over the whole run, for the log

    def scale_loss(self, loss):
        """The loss times the scale (a Tensor in, a Tensor out: backward sees the scaled graph)."""
        return loss * self.scale

    def unscale_and_check(self, grad) -> bool:
        """Divide the flat gradient (Adam.gather_grads()) by the scale in place; True if it is all finite.

        Two kernels and one host read: the sum is finite exactly when no element
        is inf or nan (inf − inf is nan, which also fails), barring an fp32
        overflow of the sum itself, which is also a reason to skip.
        """
        grad *= np.float32(1.0 / self.scale)
        return bool(np.isfinite(float(grad.sum())))  # the single host sync

    def update(self, finite: bool) -> bool:
        """Record one step's outcome; returns whether the optimizer should step."""
        if finite:
            self.consecutive_overflows = 0
            self.good_steps += 1
            if self.good_steps % self.growth_interval == 0:
                self.scale *= 2.0
            return True
        self.skipped_steps += 1
        self.consecutive_overflows += 1
        self.good_steps = 0
        self.scale = max(self.scale / 2.0, self.min_scale)
        if self.consecutive_overflows >= self.max_consecutive_overflows:
            raise LossScaleOverflowError(
                f"gradients overflowed {self.consecutive_overflows} steps in a row "
                f"(loss scale now {self.scale:g}); the run has diverged: lower the learning rate "
                f"or train in fp32")
        return False

    def state_dict(self) -> dict:
        return {"scale": self.scale, "good_steps": self.good_steps,
                "consecutive_overflows": self.consecutive_overflows, "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict) -> None:
        self.scale = float(state["scale"])
        if not math.isfinite(self.scale) or self.scale <= 0:
            raise ValueError(f"loss scale must be a positive number, got {self.scale}")
        self.good_steps = int(state["good_steps"])
        self.consecutive_overflows = int(state["consecutive_overflows"])
        self.skipped_steps = int(state["skipped_steps"])
