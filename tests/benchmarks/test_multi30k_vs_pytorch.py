"""benchmarks/multi30k_vs_pytorch.py: ours and PyTorch's nn.Transformer trained alike on Multi30k (needs torch)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from train.data.files import shared_data_dir

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import multi30k_vs_pytorch as side_by_side  # noqa: E402

from transformer.config import TransformerConfig  # noqa: E402
from transformer.loss import LabelSmoothingLoss  # noqa: E402
from transformer.model import Transformer  # noqa: E402

TINY = TransformerConfig(vocab_size=60, N=2, d_model=16, d_ff=32, h=4, impl="fused")


def _batch():
    rng = np.random.default_rng(1)
    src, tgt = rng.integers(4, 60, (3, 7)), rng.integers(4, 60, (3, 5))
    src[0, 5:], tgt[1, 3:] = 0, 0                     # padding at the ends, as batches have it
    return src, tgt


def test_weights_map_exactly_both_ways():
    """Our initial weights in PyTorch's model give our logits (eval mode), and map back unchanged."""
    ours = Transformer(TINY, np.random.default_rng(0), backend="numpy")
    peer = side_by_side.peer_model(TINY, ours.state_dict()).eval()
    src, tgt = _batch()
    ours.eval()
    with torch.no_grad():
        theirs = peer(torch.from_numpy(src), torch.from_numpy(tgt)).numpy()
    real = tgt != 0                                    # padded target rows are never scored
    np.testing.assert_allclose(theirs[real], ours(src, tgt).numpy()[real], atol=1e-5)
    back = side_by_side.from_torch(peer.state_dict(), TINY.N)
    assert back.keys() == ours.state_dict().keys()
    for name, value in ours.state_dict().items():
        np.testing.assert_array_equal(back[name], value)


def test_peer_loss_is_our_label_smoothing():
    logits = np.random.default_rng(2).standard_normal((3, 5, 60)).astype(np.float32)
    _, tgt = _batch()
    total, n = side_by_side.smoothed_loss_sum(torch.from_numpy(logits), torch.from_numpy(tgt), 0.1, 0)
    import minitensor as mt
    ours = LabelSmoothingLoss(0.1, 0)(mt.Tensor(logits), tgt)
    assert n == ours.n_tokens
    np.testing.assert_allclose(float(total) / n, float(ours.loss.numpy()), rtol=1e-5)


@pytest.mark.skipif(shared_data_dir() is None or not (shared_data_dir() / "multi30k").is_dir(),
                    reason="../shared/data/multi30k is not here")
def test_tiny_run_trains_both_sides_on_the_same_updates(tmp_path):
    """Without dropout both sides make the same updates on the same batches: the same losses at every step."""
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "benchmarks/multi30k_vs_pytorch.py", "--max-steps", "6", "--sentences", "600",
         "--eval-sentences", "8", "--set", "model.d_model=32", "--set", "model.d_ff=64", "--set", "model.p_drop=0.0",
         "--set", "tokenizer.vocab_size=300", "--set", "train.ckpt_every=2", "--set", "train.log_every=1",
         "--out", str(out), "--json"], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    ours, peer = report["ours"], report["pytorch"]
    assert ours["updates"] == peer["updates"] == 6 and report["threads"] == 1 and report["average_last"] == 3
    assert ours["tgt_tokens"] == peer["tgt_tokens"] > 0              # the same batches, token for token
    assert list(ours["train_loss"]) == list(peer["train_loss"]) == [str(s) for s in range(1, 7)]
    np.testing.assert_allclose(list(peer["train_loss"].values()), list(ours["train_loss"].values()), rtol=2e-3)
    for side in (ours, peer):
        assert side["train_s"] > 0 and side["ms_per_update"] > 0
        assert set(side["bleu"]) == {"val", "test_2016_flickr"}
        for split in side["bleu"].values():
            assert set(split) == {"greedy", "beam4"} and all(0 <= v <= 100 for v in split.values())
    assert report["time_ratio"] == pytest.approx(ours["ms_per_update"] / peer["ms_per_update"])
    assert (out / "ours" / "metrics.jsonl").is_file()
    again = subprocess.run([sys.executable, "benchmarks/multi30k_vs_pytorch.py", "--out", str(out)],
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert again.returncode == 2 and "exists" in again.stderr          # nothing is overwritten
