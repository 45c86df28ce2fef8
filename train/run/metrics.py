"""Training metrics as JSON lines, and the arithmetic behind tokens/s and MFU.

`run_dir/metrics.jsonl` gets one JSON object per line, each with a `kind`
("train", "valid", "test", "resume", ...) and a `step`. The file is only ever
appended to: when a run resumes from the checkpoint at step N, a
`{"kind": "resume", "step": N}` record is written, and `read_metrics` drops the
earlier records with step > N (the steps that were redone), so curves never
double back.

MFU (model FLOPs utilisation) = achieved model FLOP/s / the device's peak.
Model FLOPs follow the usual estimate: a forward pass costs 2 FLOPs per
weight per token plus the attention products, a backward pass twice that.
The paper reports training cost in FLOPs too (Table 2). GPUs have a datasheet
peak (PEAK_TFLOPS); a CPU has none we can trust (the clock in /proc/cpuinfo is
the current one, not the sustained one; FMA units per core and the threads the
run uses vary), so on a CPU MFU is not reported rather than reported wrong.

Shapes: S source length, T target length, D = d_model, H heads, K = d_k, V vocab.
"""

import json
import time
from pathlib import Path

from train.errors import naming

# Peak dense TFLOP/s per precision, from the vendors' datasheets (no sparsity).
# "fp32" is the plain CUDA-core rate; "tf32"/"fp16"/"bf16" the tensor-core rates.
PEAK_TFLOPS = {
    "H200": {"fp32": 67.0, "tf32": 495.0, "fp16": 989.0, "bf16": 989.0},
    "H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0},
    "H100": {"fp32": 67.0, "tf32": 495.0, "fp16": 989.0, "bf16": 989.0},  # SXM
    "A100": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
    "V100": {"fp32": 15.7, "fp16": 125.0},  # SXM2
    "P100": {"fp32": 9.3, "fp16": 18.7},  # PCIe; §5.2 trained on 8 of these
}


METRICS_FILE = "metrics.jsonl"


class MetricsWriter:
    """Append-only JSON-lines log; each `write` is flushed so a crash loses nothing.

    `mirror` (a train.run.tensorboard.TensorBoardLog, say) is given every record too. With the
    run's `manifest` (train/run/manifest.py), the log is recorded there when it is closed.
    """

    def __init__(self, path: str | Path, mirror=None, manifest=None):
        self.path = Path(path)
        with naming(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = open(self.path, "a", encoding="utf-8")
        self.mirror, self.manifest = mirror, manifest

    def write(self, kind: str, step: int, **values) -> dict:
        record = {"kind": kind, "step": int(step), "time": round(time.time(), 3), **values}
        with naming(self.path):
            self.file.write(json.dumps(record, sort_keys=True) + "\n")
            self.file.flush()
        if self.mirror is not None:
            self.mirror.write(record)
        return record

    def close(self) -> None:
        self.file.close()
        if self.manifest is not None:
            self.manifest.record(self.path.relative_to(self.manifest.run_dir).as_posix(), append=True)
        if self.mirror is not None:
            self.mirror.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_metrics(path: str | Path, kind: str | None = None) -> list[dict]:
    """Records of metrics.jsonl in order (only `kind` if given), without steps redone after a resume.

    A truncated last line (the process was killed mid-write) is ignored.
    """
    path = Path(path)
    if not path.is_file():
        return []
    records: list[dict] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("kind") == "resume":
            records = [r for r in records if r.get("step", 0) <= record["step"]]
        records.append(record)
    return [r for r in records if kind is None or r.get("kind") == kind]


# ----------------------------------------------------------------- FLOPs and MFU
def forward_flops(model_config, src_tokens: int, tgt_tokens: int, src_len: int, tgt_len: int) -> float:
    """Approximate matmul FLOPs of one forward pass over a batch (2 FLOPs per multiply-add).

    Per token and attention sub-layer: the projections W_Q, W_K (D x HK), W_V (D x HV)
    and W_O (HV x D), plus the scores QK^T and the weighted sum, H·(K + V) per key
    position (§3.2.1 Eq. (1)). Per layer the FFN has two D x d_ff matmuls (§3.3 Eq. (2)).
    Decoder layers add cross-attention; each target token pays the output projection D x V.
    """
    c = model_config
    d, hk, hv = c.d_model, c.h * c.d_k, c.h * c.d_v
    proj = 2 * (2 * d * hk + 2 * d * hv)  # W_Q, W_K, W_V, W_O
    ffn = 2 * 2 * d * c.d_ff  # §3.3 Eq. (2): two matmuls
    enc = c.N * src_tokens * (proj + ffn + 2 * c.h * (c.d_k + c.d_v) * src_len)
    dec_self = proj + 2 * c.h * (c.d_k + c.d_v) * tgt_len
    dec_cross = proj / 2 + 2 * c.h * (c.d_k + c.d_v) * src_len  # W_Q, W_O per target token
    memory_kv = c.N * src_tokens * proj / 2  # cross-attention W_K, W_V run once per source token
    dec = c.N * tgt_tokens * (dec_self + dec_cross + ffn) + memory_kv
    out = tgt_tokens * 2 * d * c.vocab_size
    return float(enc + dec + out)


def train_flops(model_config, src_tokens: int, tgt_tokens: int, src_len: int, tgt_len: int) -> float:
    """Forward + backward ≈ 3 × forward (the backward computes two products per forward one)."""
    return 3.0 * forward_flops(model_config, src_tokens, tgt_tokens, src_len, tgt_len)


def peak_tflops(device_name: str, precision: str = "fp32") -> tuple[float | None, str]:
    """(peak dense TFLOP/s or None, a label saying where it came from) for a device name."""
    for key, table in PEAK_TFLOPS.items():
        if key.lower() in device_name.lower():
            if precision in table:
                return table[precision], f"{key} {precision} datasheet"
            return None, f"{key} has no {precision} entry"
    return None, "n/a (no datasheet peak for this device)"


def mfu(flops_per_second: float, peak: float | None) -> float | None:
    """Fraction of peak (0..1), or None when the peak is unknown."""
    return None if not peak else flops_per_second / (peak * 1e12)
