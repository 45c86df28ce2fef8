"""Validation during training: dev loss and perplexity, BLEU on a dev sample, the best checkpoint, early stopping.

`validate` measures the label-smoothed loss and the true perplexity over the whole dev set
(§6.2 reports per-subword perplexity on newstest2013) and sacreBLEU of greedy (or beam)
translations of its first `train.valid_bleu_sentences` sentences.

`train.best_metric` decides which validation is the best (best.safetensors) and what
`train.patience` counts: "loss", the dev loss over every dev sentence (the default), or "bleu".
BLEU on a few sentences is mostly noise (one sentence moves 20-sentence BLEU by points), so
"bleu" needs a sample of at least MIN_BLEU_SENTENCES (or the whole of a smaller dev set).
"""

import math

import minitensor as mt
from train.config import RunConfig
from train.data.inputs import Prepared, make_model_inputs, split_batches
from train.errors import InputError
from train.evaluate.scores import corpus_scores
from train.evaluate.translate import translate_ids
from train.run import checkpointing
from train.run.checkpointing import TrainState

MIN_BLEU_SENTENCES = 500


def check_best_metric(run_config: RunConfig, prepared: Prepared) -> None:
    """BLEU decides only on a sample of at least 500 dev sentences (or the whole dev set, when smaller)."""
    train, dev = run_config.train, len(prepared.valid.src_ids)
    sample, needed = min(train.valid_bleu_sentences, dev), min(MIN_BLEU_SENTENCES, dev)
    if train.best_metric == "bleu" and sample < needed:
        raise InputError(f"train.best_metric = 'bleu' needs BLEU on at least {needed} dev sentences, but "
                         f"train.valid_bleu_sentences = {train.valid_bleu_sentences}: set it to {needed} or more, "
                         f"or use train.best_metric = 'loss' (the dev loss, over every sentence)")


def validate(model, loss_fn, prepared: Prepared, run_config: RunConfig) -> dict:
    """Validation loss and perplexity over the whole split, BLEU on its first sentences (greedy or beam)."""
    split, train = prepared.valid, run_config.train
    model.eval()
    loss_sum = nll_sum = 0.0
    n_tokens = 0
    with mt.no_grad():
        for batch in split_batches(split, train.max_tokens):
            src, tgt_in, tgt_out = make_model_inputs([split.src_ids[i] for i in batch],
                                                     [split.tgt_ids[i] for i in batch])
            out = model.loss(src, tgt_in, tgt_out, loss_fn)
            loss_sum += float(out.loss.item()) * out.n_tokens
            nll_sum += float(out.nll_sum.data if isinstance(out.nll_sum, mt.Tensor) else out.nll_sum)
            n_tokens += out.n_tokens
    model.train()
    result = {"loss": loss_sum / n_tokens, "nll": nll_sum / n_tokens,
              "ppl": math.exp(min(nll_sum / n_tokens, 50.0))}
    n = min(train.valid_bleu_sentences, len(split.src_ids))
    if n:
        hyps = translate_ids(model, split.src_ids[:n], beam=train.valid_beam, alpha=run_config.decode.alpha,
                             max_len_b=run_config.decode.max_len_b, max_tokens=run_config.decode.max_tokens,
                             early_stop=run_config.decode.early_stop)
        scores = corpus_scores([prepared.tokenizer.decode(h) for h in hyps], split.tgt_text[:n], paper=None)
        result.update(bleu=scores.bleu, exact_match=scores.exact_match, bleu_sentences=n)
    return result


def run_validation(model, loss_fn, prepared, run_config, state: TrainState, run_dir, metrics, say) -> dict:
    """Validate, log, and keep best.safetensors and the early-stopping count up to date."""
    at = state.progress
    record = validate(model, loss_fn, prepared, run_config)
    score = record["bleu"] if run_config.train.best_metric == "bleu" else -record["loss"]
    improved = at.best_score is None or score > at.best_score
    if improved:
        at.best_score, at.best_step, at.bad_validations = score, at.step, 0
        checkpointing.save_best(run_dir, state, record)
    else:
        at.bad_validations += 1
    metrics.write("valid", at.step, best=improved, **record)
    bleu = f", BLEU {record['bleu']:.2f} on {record['bleu_sentences']} sentences" if "bleu" in record else ""
    best = " (best so far: best.safetensors)" if improved else f" (best: step {at.best_step})"
    say(f"step {at.step:>7} | valid loss {record['loss']:.3f}, nll {record['nll']:.3f}, "
        f"ppl {record['ppl']:.2f}{bleu}{best}")
    return record
