"""The GPU kernel files keep their headers honest (runs without a GPU).

Each cuda.cu header lists exactly the versions its kernels define; each cupy_launch.py and
numba_cuda.py docstring lists exactly the keys of its VERSIONS, and DEFAULT is one of them.
"""
import importlib
import re
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parents[3] / "minitensor" / "kernels"
CUDA_OPS = ["softmax_forward", "softmax_backward", "layernorm_forward", "layernorm_backward",
            "cross_entropy_forward", "adam_step", "dropout_forward", "embedding_backward", "matmul_forward",
            "bf16_cast"]
NUMBA_CUDA_OPS = ["softmax_forward", "layernorm_forward", "bf16_cast"]


def _header_versions(text, comment):
    """Versions named as 'vN:' at the start of a line in the leading comment/docstring block."""
    header = text.split("\n\n\n")[0] if comment == "//" else text.split('"""')[1]
    prefix = re.escape(comment) + r"\s*" if comment else r"\s*"
    return {int(v) for v in re.findall(rf"^{prefix}v(\d+):", header, flags=re.M)}


@pytest.mark.parametrize("op", CUDA_OPS)
def test_cuda_header_lists_exactly_the_defined_kernels(op):
    text = (KERNELS / op / "cuda.cu").read_text()
    defined = {int(v) for v in re.findall(rf"__global__ void (?:__launch_bounds__\(\d+\)\s*)?\n?{op}_v(\d+)", text)}
    defined |= {int(v) for v in re.findall(rf"^{op}_v(\d+)\(", text, flags=re.M)}  # name on its own line
    assert defined, f"{op}: no kernels found"
    assert _header_versions(text, "//") == defined


@pytest.mark.parametrize("module", [f"{op}.cupy_launch" for op in CUDA_OPS]
                         + [f"{op}.numba_cuda" for op in NUMBA_CUDA_OPS])
def test_python_header_lists_exactly_the_versions(module):
    mod = importlib.import_module(f"minitensor.kernels.{module}")
    assert _header_versions(mod.__doc__ and f'"""{mod.__doc__}"""', None) == set(mod.VERSIONS)
    assert mod.DEFAULT in mod.VERSIONS
