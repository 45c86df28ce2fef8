"""Ours against PyTorch's `nn.Transformer`, trained side by side on Multi30k with everything else equal.

Optional: needs torch (never a dependency of the packages). Both sides train on one CPU thread:

    python benchmarks/multi30k_vs_pytorch.py [--config configs/multi30k_cpu.toml] [--json]
    python benchmarks/multi30k_vs_pytorch.py --max-steps 20 --sentences 2000 --eval-sentences 50 \\
        --set model.d_model=64 --set model.d_ff=128 --set tokenizer.vocab_size=500 --out /tmp/m30k   # a minute

What is equal. The config (§3 model, §5.1 batches, §5.3 Adam 0.9/0.98/1e-9 and the Eq. (3) rate with
its warm-up and factor, §5.4 dropout and label smoothing, §6.1 checkpoint averaging), the data
(Multi30k task 1 from ../shared/data, or the first --sentences pairs of it), the tokenizer, and the
batches: ours is `train.run.loop.fit` with the config; PyTorch takes the prepared data and the very
update order fit takes (`train.run.loop._next_batches`, one update plan), so both see the same
micro-batches, the same number of updates and the same target tokens (the JSON's tgt_tokens).
The PyTorch model (benchmarks/torch_peer.py PeerTransformer: post-norm, tied embedding ×√d_model,
sinusoids, dropout on residuals and embedding sums) starts from our model's initial weights
(the layouts map exactly, `to_torch`), with our smoothed targets (1 − ε on gold, ε/(V − 2) on each
other non-pad token); only the dropout masks differ. Checkpoints are kept as fit keeps them
(every train.ckpt_every updates and the last) and the last train.average_last averaged on both sides.

Decoding. Both sides' averaged weights are decoded by OUR search (greedy, and beam decode.beam with
the GNMT length penalty decode.alpha, §6.1): PyTorch's trained weights are loaded into our model
(`from_torch`), so the BLEU compares training, not two searches. sacreBLEU (13a, cased) on val and
test_2016_flickr.

Time: the training time of each side (ours: fit's time in updates, batch assembly included, as
PyTorch's is counted), and per update after the first (which compiles or loads kernels). The
training loss is logged over the same updates on both sides (fit's log steps; train_loss).
The sides train one after the other, so a load that changes between them moves the time ratio:
benchmarks/step_vs_pytorch_interleaved.py times the two updates in turns for that ratio. The sides run one after the other in one process; the load
average is printed, since other programs on the cores slow whichever side runs beside them.
"""
from __future__ import annotations

import os
import sys

THREADS = "1"                                  # before NumPy, Numba and torch load their thread pools
for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_name] = THREADS

import argparse  # noqa: E402
import contextlib  # noqa: E402
import copy  # noqa: E402
import dataclasses  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from torch_peer import PeerTransformer  # noqa: E402
from train import config as config_lib  # noqa: E402
from train.data.files import multi30k_paths  # noqa: E402
from train.data.inputs import corpus_batch  # noqa: E402
from train.distributed.global_batch import plan_update  # noqa: E402
from train.errors import InputError  # noqa: E402
from train.evaluate.scores import corpus_scores  # noqa: E402
from train.evaluate.translate import translate_ids  # noqa: E402
from train.run import checkpointing  # noqa: E402
from train.run.checkpointing import Progress  # noqa: E402
from train.run.loop import _next_batches, fit, logged_step  # noqa: E402
from train.run.metrics import METRICS_FILE, read_metrics  # noqa: E402
from train.threads import cpu_threads  # noqa: E402
from transformer.model import Transformer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPLITS = ("val", "test_2016_flickr")


# ------------------------------------------------------------------ the weights, ours <-> PyTorch
def _attention_pairs(ours: str, theirs: str):
    """(our name, torch name, how): our x·W (in, out) is torch's x·Wᵀ; q, k, v stack into in_proj."""
    return [(f"{ours}.w_o.weight", f"{theirs}.out_proj.weight", "T"), (f"{ours}.w_o.bias", f"{theirs}.out_proj.bias", ""),
            ([f"{ours}.w_{n}.weight" for n in "qkv"], f"{theirs}.in_proj_weight", "T"),
            ([f"{ours}.w_{n}.bias" for n in "qkv"], f"{theirs}.in_proj_bias", "")]


def weight_map(n_layers: int) -> list[tuple]:
    """Every (our parameter name or names, PyTorch name, "T" when transposed) of the two models."""
    pairs = [("embeddings.shared.weight", "embed.weight", "")]
    for stack, attentions, norms in (("encoder", (("self_attn", "self_attn"),), 2),
                                     ("decoder", (("self_attn", "self_attn"), ("cross_attn", "multihead_attn")), 3)):
        for i in range(n_layers):
            ours, theirs = f"{stack}.layers.{i}", f"transformer.{stack}.layers.{i}"
            for a, b in attentions:
                pairs += _attention_pairs(f"{ours}.{a}", f"{theirs}.{b}")
            for j in (1, 2):
                pairs += [(f"{ours}.feed_forward.w_{j}.weight", f"{theirs}.linear{j}.weight", "T"),
                          (f"{ours}.feed_forward.w_{j}.bias", f"{theirs}.linear{j}.bias", "")]
            for j in range(norms):                     # sub-layer j's LayerNorm is torch's norm{j+1}
                pairs += [(f"{ours}.sublayers.{j}.norm.gamma", f"{theirs}.norm{j + 1}.weight", ""),
                          (f"{ours}.sublayers.{j}.norm.beta", f"{theirs}.norm{j + 1}.bias", "")]
    return pairs


def check_mappable(model_config) -> None:
    c = model_config
    if not (c.norm == "post" and c.tie_embeddings and c.positional == "sinusoidal" and c.d_k * c.h == c.d_model
            and c.d_v * c.h == c.d_model and c.attention_dropout == 0.0):
        raise InputError("nn.Transformer holds only the paper's base layout: post-norm, tied embeddings, sinusoids, "
                         "d_k = d_v = d_model/h, no attention dropout; this config differs")


def to_torch(state: dict, n_layers: int) -> dict:
    """Our state dict (NumPy, x·W layout) as PeerTransformer's."""
    out = {}
    for ours, theirs, how in weight_map(n_layers):
        value = np.concatenate([state[n] for n in ours], axis=-1) if isinstance(ours, list) else state[ours]
        out[theirs] = torch.from_numpy(np.ascontiguousarray(value.T if how else value)).float()
    return out


def from_torch(state: dict, n_layers: int) -> dict:
    """PeerTransformer's state dict as ours (NumPy)."""
    out = {}
    for ours, theirs, how in weight_map(n_layers):
        value = state[theirs].detach().cpu().numpy()
        value = value.T if how else value
        if isinstance(ours, list):
            for name, part in zip(ours, np.split(value, len(ours), axis=-1)):
                out[name] = np.ascontiguousarray(part)
        else:
            out[ours] = np.ascontiguousarray(value)
    return out


def peer_model(model_config, init_state: dict) -> PeerTransformer:
    c = model_config
    check_mappable(c)
    peer = PeerTransformer(c.vocab_size, c.d_model, c.N, c.h, c.d_ff, c.p_drop, layernorm_eps=c.layernorm_eps)
    peer.load_state_dict({**peer.state_dict(), **to_torch(init_state, c.N)})
    return peer


def smoothed_loss_sum(logits, targets, eps: float, pad_id: int):
    """Σ over non-pad targets of −Σ_j q_j log p_j with our q (transformer/loss.py, §5.4), and the token count."""
    log_p = torch.log_softmax(logits.float().reshape(-1, logits.shape[-1]), dim=-1)       # (N, V)
    flat = targets.reshape(-1)
    gold = log_p.gather(1, flat[:, None])[:, 0]
    others = log_p.sum(-1) - gold - log_p[:, pad_id]
    rows = -((1 - eps) * gold + eps / (log_p.shape[1] - 2) * others)
    keep = flat != pad_id
    return (rows * keep).sum(), int(keep.sum())


# ------------------------------------------------------------------ the two trainings
def train_ours(run_config, out: Path, quiet: bool) -> dict:
    with contextlib.redirect_stdout(sys.stderr) if quiet else contextlib.nullcontext():
        start = time.perf_counter()
        result = fit(run_config, out / "ours", progress=not quiet)
        wall = time.perf_counter() - start
    model = checkpointing.averaged_model(result.model, result.checkpoints, run_config.train.average_last)
    at = result.progress
    logged = read_metrics(out / "ours" / METRICS_FILE, "train")
    return {"result": result, "model": model, "updates": at.step, "tgt_tokens": at.tokens_seen,
            "train_s": at.elapsed_s, "first_update_s": next(r["seconds"] for r in logged if r["step"] == 1),
            "train_loss": {r["step"]: r["loss"] for r in logged}}


def initial_state(run_config, vocab_size: int) -> dict:
    """The weights fit started from: the model is the first draw of the run's generator (train/run/loop.py)."""
    config = run_config.model.replace(vocab_size=vocab_size)
    return Transformer(config, np.random.default_rng(run_config.train.seed), backend="numpy").state_dict()


def train_peer(run_config, prepared, init_state: dict, log) -> dict:
    """PyTorch through the updates fit made: the same batches in the same order, Adam and Eq. (3) as ours."""
    train, model_config = run_config.train, run_config.model.replace(vocab_size=prepared.tokenizer.vocab_size)
    torch.manual_seed(train.seed)
    peer = peer_model(model_config, init_state)
    opt = torch.optim.Adam(peer.parameters(), lr=0.0, betas=(train.adam_beta1, train.adam_beta2), eps=train.adam_eps)
    per_update = plan_update(train, 1).batches
    progress, kept, tokens, seconds, first, window, losses = Progress(), [], 0, 0.0, 0.0, [0.0, 0], {}
    peer.train()
    for step in range(1, train.max_steps + 1):
        t0 = time.perf_counter()
        batches = [corpus_batch(prepared.train, b) for b in _next_batches(prepared, progress, train.seed, per_update)]
        n_target = sum(int((t != model_config.pad_id).sum()) for _, _, t in batches)
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for src, tgt_in, tgt_out in batches:                  # micro-batches: the gradient of the update's mean
            logits = peer(torch.from_numpy(src), torch.from_numpy(tgt_in))
            total, _ = smoothed_loss_sum(logits, torch.from_numpy(tgt_out), model_config.eps_ls, model_config.pad_id)
            (total / n_target).backward()
            loss_sum += float(total.detach())
        rate = train.lr_factor * model_config.d_model ** -0.5 * min(step ** -0.5, step * train.warmup_steps ** -1.5)
        for group in opt.param_groups:
            group["lr"] = rate                                   # §5.3 Eq. (3), step counted from 1 as ours
        opt.step()
        seconds += time.perf_counter() - t0
        first = seconds if step == 1 else first
        tokens += n_target
        window = [window[0] + loss_sum, window[1] + n_target]
        if logged_step(step, train.log_every):                 # the loss over the same updates as fit's log line
            losses[step], window = window[0] / window[1], [0.0, 0]
        if step % train.ckpt_every == 0 or step == train.max_steps:
            kept = (kept + [copy.deepcopy(peer.state_dict())])[-train.average_last:]
        if step % train.log_every == 0 or step == train.max_steps:
            log(f"pytorch step {step}: loss {loss_sum / n_target:.3f}, {seconds:.0f} s")
    averaged = {k: sum(s[k] for s in kept) / len(kept) for k in kept[0]}   # §6.1 (the same weights when one)
    return {"state": averaged, "updates": train.max_steps, "tgt_tokens": tokens, "train_s": seconds,
            "first_update_s": first, "train_loss": losses}


# ------------------------------------------------------------------ data, decoding, the table
def shrunk_task(run_config, sentences: int, out: Path):
    """The config on the first `sentences` training pairs (written under out/data); val and test whole."""
    folder = out / "data"
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for side, path in zip(("src", "tgt"), multi30k_paths("train")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            (folder / f"train.{side}").write_text("".join(line for _, line in zip(range(sentences), f)), encoding="utf-8")
        files[f"train_{side}"] = str(folder / f"train.{side}")
    for split, key in (("val", "valid"), ("test_2016_flickr", "test")):
        files[f"{key}_src"], files[f"{key}_tgt"] = (str(p) for p in multi30k_paths(split))
    return run_config.replace(task=dataclasses.replace(run_config.task, kind="files", **files))


def eval_pairs(prepared, n: int | None) -> dict[str, tuple[list, list[str]]]:
    """{split: (source ids, reference texts)} of val and test, the first `n` of each (all when None)."""
    return {split: (part.src_ids[:n], part.tgt_text[:n]) for split, part in zip(SPLITS, (prepared.valid, prepared.test))}


def bleu(model, tokenizer, pairs, beam: int, alpha: float, max_len_b: int) -> float:
    sources, refs = pairs
    ids = translate_ids(model, sources, beam=beam, alpha=alpha, max_len_b=max_len_b)
    return corpus_scores([tokenizer.decode(h) for h in ids], refs, paper=None).bleu


def scores(model, tokenizer, pairs: dict, decode) -> dict:
    searches = {"greedy": (1, 0.0), f"beam{decode.beam}": (decode.beam, decode.alpha)}
    return {split: {name: round(bleu(model, tokenizer, split_pairs, beam, alpha, decode.max_len_b), 2)
                    for name, (beam, alpha) in searches.items()}
            for split, split_pairs in pairs.items()}


def table(report: dict) -> str:
    rows = [("side", "updates", "tgt tokens", "train s", "ms/update", "last loss")
            + tuple(f"{split} {name}" for split in SPLITS for name in report["ours"]["bleu"][split])]
    for side in ("ours", "pytorch"):
        r = report[side]
        rows.append((side, str(r["updates"]), f"{r['tgt_tokens']:,}", f"{r['train_s']:.1f}", f"{r['ms_per_update']:.1f}",
                     f"{r['train_loss'][max(r['train_loss'])]:.3f}")
                    + tuple(f"{v:.2f}" for split in SPLITS for v in r["bleu"][split].values()))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows]
    return "\n".join(lines + [f"time per update, ours / PyTorch: {report['time_ratio']:.2f} (one thread each; "
                              f"load average {report['load_before']:.1f} before, {report['load_after']:.1f} after)",
                              f"decoded by: {report['decoded_by']}"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "multi30k_cpu.toml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config value, e.g. model.d_model=64 (repeatable)")
    ap.add_argument("--max-steps", type=int, default=None, help="updates (default the config's train.max_steps)")
    ap.add_argument("--sentences", type=int, default=0, help="train on the first N pairs only (default all)")
    ap.add_argument("--eval-sentences", type=int, default=0, help="score the first N of val and test (default all)")
    ap.add_argument("--out", type=Path, default=Path("runs") / "multi30k_vs_pytorch", help="a new folder for the runs")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if args.json else (lambda m: print(m, flush=True))
    try:
        overrides = args.set + ([f"train.max_steps={args.max_steps}"] if args.max_steps is not None else [])
        run_config = config_lib.load(args.config, overrides + [f"train.threads={THREADS}", "train.backend=cpu"])
        run_config = run_config.replace(train=dataclasses.replace(
            run_config.train, valid_every=run_config.train.max_steps, valid_bleu_sentences=0))  # scored here instead
        if args.out.exists():
            raise InputError(f"{args.out}: exists; choose another --out (nothing is overwritten)")
        if run_config.task.kind != "multi30k":
            raise InputError(f"{args.config}: task.kind = {run_config.task.kind!r}; this benchmark is Multi30k's")
        check_mappable(run_config.model)
        if args.sentences:
            run_config = shrunk_task(run_config, args.sentences, args.out)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    torch.set_num_threads(int(THREADS))
    torch.set_num_interop_threads(int(THREADS))
    load_before = os.getloadavg()[0]
    ours = train_ours(run_config, args.out, quiet=args.json)
    prepared, tokenizer = ours["result"].prepared, ours["result"].tokenizer
    pairs = eval_pairs(prepared, args.eval_sentences or None)
    init = initial_state(run_config, tokenizer.vocab_size)
    say(f"pytorch {torch.__version__}: {run_config.train.max_steps} updates on the same batches, from ours' initial weights")
    peer = train_peer(run_config, prepared, init, say)
    load_after = os.getloadavg()[0]
    peer_ours = Transformer(ours["model"].config, np.random.default_rng(0), backend=run_config.train.backend)
    peer_ours.load_state_dict(from_torch(peer["state"], run_config.model.N))
    report = {"config": str(args.config), "overrides": overrides, "threads": int(THREADS),
              "sentences": args.sentences or len(prepared.train_index), "eval_sentences": args.eval_sentences or None,
              "average_last": run_config.train.average_last, "beam": run_config.decode.beam,
              "alpha": run_config.decode.alpha, "torch": torch.__version__, "load_before": load_before,
              "load_after": load_after,
              "decoded_by": "our search for both sides (PyTorch's averaged weights loaded into our model)"}
    with cpu_threads(int(THREADS)):
        for side, model, record in (("ours", ours["model"], ours), ("pytorch", peer_ours, peer)):
            say(f"decoding {side}: greedy and beam {run_config.decode.beam} on {', '.join(SPLITS)}")
            later = max(record["updates"] - 1, 1)              # the first update compiles or loads kernels
            report[side] = {"updates": record["updates"], "tgt_tokens": record["tgt_tokens"],
                            "train_s": record["train_s"], "first_update_s": record["first_update_s"],
                            "ms_per_update": 1e3 * (record["train_s"] - record["first_update_s"]) / later,
                            "train_loss": record["train_loss"],
                            "bleu": scores(model, tokenizer, pairs, run_config.decode)}
    report["time_ratio"] = report["ours"]["ms_per_update"] / report["pytorch"]["ms_per_update"]
    print(json.dumps(report) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
