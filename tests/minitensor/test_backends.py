"""Every backend computes the same numbers as the NumPy reference, also on non-contiguous inputs;
every kernel implementation has the signature Backend documents; choosing backends has no side effects
at import time."""
import importlib
import inspect
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
from minitensor.backends.base import KERNELS, Backend
from minitensor.functions import CrossEntropy, LayerNorm
from strategies import shapes


@st.composite
def permuted_arrays(draw):
    """A float32 array viewed through a random axis permutation: strides that are not C order."""
    shape = draw(shapes(min_dims=2, max_dims=4))
    perm = draw(st.permutations(range(len(shape))))
    data = np.random.default_rng(draw(st.integers(0, 1000))).standard_normal(shape).astype(np.float32)
    return data.transpose(perm)


OPS = {
    "softmax": lambda x: x.softmax(scale=0.5),
    "log_softmax": lambda x: x.log_softmax(),
    "layer_norm": lambda x: LayerNorm.apply(x, mt.ones(x.shape[-1:], backend=x.backend),
                                            mt.zeros(x.shape[-1:], backend=x.backend), eps=1e-5),
    "arith": lambda x: ((x * 2 + 1).exp() / (x.tanh() + 3)).relu().sum(axis=0),
    "matmul": lambda x: x @ x.transpose(-1, -2),
}


@pytest.mark.parametrize("op", sorted(OPS))
@given(array=permuted_arrays())
def test_forward_and_backward_match_numpy_on_non_contiguous_input(backend, op, array):
    ref_in = mt.tensor(array, requires_grad=True, backend="numpy")
    x = mt.tensor(mt.get_backend(backend).asarray(array), requires_grad=True, backend=backend)
    out_ref, out = OPS[op](ref_in), OPS[op](x)
    mt.assert_close(out, out_ref, f"{op} forward on {backend}", rtol=1e-4, atol=1e-5)
    r = np.random.default_rng(0).standard_normal(out.shape).astype(np.float32)
    (out_ref * r).sum().backward()
    (out * mt.get_backend(backend).asarray(r)).sum().backward()
    mt.assert_close(x.backend.to_numpy(x.grad), ref_in.grad, f"{op} grad on {backend}", rtol=1e-4, atol=1e-5)


def test_cross_entropy_and_embedding_match_numpy(backend):
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((9, 31)).astype(np.float32)
    targets = rng.integers(0, 31, 9)
    targets[2] = 0
    outs = {}
    for name in ("numpy", backend):
        b = mt.get_backend(name)
        z = mt.tensor(b.asarray(logits), requires_grad=True, backend=name)
        loss, nll = CrossEntropy.apply(z, targets=b.asarray(targets), smoothing=0.1, ignore_index=0)
        loss.sum().backward()
        outs[name] = (loss.numpy(), b.to_numpy(nll), b.to_numpy(z.grad))
    for ours, ref, what in zip(outs[backend], outs["numpy"], ["loss", "nll", "dlogits"]):
        mt.assert_close(ours, ref, f"cross-entropy {what} on {backend}")


def test_tensor_to_moves_between_backends():
    x = mt.tensor([1.0, 2.0], backend="numpy", requires_grad=True)
    y = x.to("numpy")
    assert y is x
    z = x.to("cpu")
    assert z.requires_grad and z.device == "cpu"
    np.testing.assert_array_equal(z.numpy(), x.numpy())


def test_default_backend_is_the_numpy_reference():
    assert mt.backends.get_backend().name == "numpy"


@pytest.mark.parametrize("op", KERNELS)
@pytest.mark.parametrize("file", ["reference", "numba_cpu", "cupy_launch"])
def test_every_kernel_file_has_the_documented_signature(op, file):
    """Each kernels/<op>/<file>.py entry point takes exactly Backend.<op>'s parameters (cupy_launch
    imports without CuPy), and the backends built from those files expose it."""
    if file == "numba_cpu":
        pytest.importorskip("numba")
    module = importlib.import_module(f"minitensor.kernels.{op}.{file}")
    kernel = getattr(module, f"{op}_ref" if file == "reference" else op)
    documented = list(inspect.signature(getattr(Backend, op)).parameters)[1:]  # without self
    assert list(inspect.signature(kernel).parameters) == documented, f"{op}/{file}.py"
    backend = {"reference": "numpy", "numba_cpu": "numba", "cupy_launch": "cupy"}[file]
    if mt.available(backend):
        assert getattr(mt.get_backend(backend), op) is kernel


def test_importing_minitensor_leaves_numba_settings_alone():
    """Numba's threading layer is set when the Numba backend is made, not as a side effect of imports."""
    pytest.importorskip("numba")
    code = ("import numba, minitensor, minitensor.kernels, minitensor.kernels.softmax_forward.numba_cpu\n"
            "assert numba.config.THREADING_LAYER == 'default', numba.config.THREADING_LAYER\n"
            "minitensor.get_backend('numba')\n"
            "assert numba.config.THREADING_LAYER == 'workqueue', numba.config.THREADING_LAYER\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])  # this checkout's minitensor
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr


def test_cpu_alias_prefers_numba_when_available():
    assert mt.get_backend("cpu").name == ("numba" if mt.available("numba") else "numpy")
    assert not mt.available("tpu")


def test_unavailable_gpu_is_explained():
    if mt.available("cuda"):
        pytest.skip("a GPU is available here")
    assert mt.why_unavailable("cuda")
    with pytest.raises(RuntimeError, match="not available"):
        mt.tensor([1.0], backend="cuda")
