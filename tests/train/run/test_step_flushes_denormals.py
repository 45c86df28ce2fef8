"""train_step computes with denormals flushed (a trained model's attention makes them, 4x slower) and leaves the thread as it found it."""
import numpy as np
import pytest

from minitensor.backends import denormals
from train.run.step import train_step
from train.experiments.step_setup import setup
from transformer.config import TransformerConfig

pytestmark = pytest.mark.skipif(not denormals.X86, reason="MXCSR is x86's")


def test_the_update_runs_with_ftz_and_daz_and_restores_them():
    config = TransformerConfig(vocab_size=50, N=1, d_model=16, h=2, d_ff=32, impl="fused")
    model, opt, loss_fn, scaler, batch = setup(config, "cpu", "fp32", 2, 5, 4)
    seen = []

    def loss_watching_the_bits(logits, targets):
        seen.append(denormals.mxcsr() & (denormals.FTZ | denormals.DAZ))
        return loss_fn(logits, targets)

    before = denormals.mxcsr()
    stats = train_step(model, batch, opt, loss_watching_the_bits, scaler)
    assert stats.stepped and seen == [denormals.FTZ | denormals.DAZ]
    assert denormals.mxcsr() == before
    assert np.float32(1e-39) * np.float32(1.0) > 0
