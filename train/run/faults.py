"""What stops a training run early, on purpose or not: signals and numeric divergence.

SIGINT/SIGTERM finish the current update and checkpoint (graceful stop); a
non-finite fp32 loss or gradient raises DivergedError naming the step and the
first parameter at fault, leaving the last good checkpoint the newest.
"""
from __future__ import annotations

import signal
import threading
from pathlib import Path

from train.run import checkpointing


class DivergedError(RuntimeError):
    """A non-finite loss or gradient in fp32: training stops, the last good checkpoint is kept."""


class StopSignals:
    """SIGINT/SIGTERM set a flag that the loop checks after each update (a second SIGINT stops at once).

    Handlers can only be installed from the main thread; elsewhere this does nothing.
    The previous handlers are restored on exit.
    """

    SIGNALS = ("SIGINT", "SIGTERM")

    def __init__(self):
        self.received: str | None = None
        self._previous = {}

    def _handle(self, signum, frame) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # the user insists: stop now, resume from the last checkpoint
        self.received = signal.Signals(signum).name

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                if hasattr(signal, name):
                    signum = getattr(signal, name)
                    self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def raise_diverged(model, loss, step: int, run_dir: Path) -> None:
    """Raise DivergedError for a non-finite fp32 update, naming the step and the first parameter at fault."""
    xp = model.backend.xp
    culprit = next((name for name, p in model.named_parameters()
                    if p.grad is not None and not bool(xp.isfinite(p.grad).all())), None)
    where = f"first non-finite gradient in {culprit!r}" if culprit else "gradients are finite"
    good = checkpointing.latest_valid(run_dir)
    kept = f"the last good checkpoint is {good.name}" if good else "no checkpoint was written"
    raise DivergedError(f"step {step}: training diverged: loss is {float(loss)}, {where}; {kept}; "
                        f"lower train.lr_factor, raise train.warmup_steps or set train.clip_norm")
