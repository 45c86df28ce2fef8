"""Greedy decoding and beam search with the GNMT length penalty (§6.1).

Shapes: B sentences, k = beam, n = B·k rows decoded together, V vocab.

§6.1: "beam search with a beam size of 4 and length penalty α = 0.6 ... We set the
maximum output length during inference to input length + 50, but terminate early
when possible."

Conventions (chosen and documented):
- Max output length per sentence L = (non-pad source tokens) + max_len_b, capped by
  config.max_len (the positions table). Lengths count generated tokens including EOS;
  a hypothesis still open at L tokens is finished as it is (no EOS).
- Length penalty (Wu et al. 2016, GNMT): lp(|Y|) = ((5 + |Y|) / 6)^α,
  score(Y) = log P(Y) / lp(|Y|).
- Padding and BOS are never generated.
- Each step takes the 2k best continuations of a sentence's k live hypotheses; an EOS
  continuation ranked among the first k finishes a hypothesis (frozen: never extended
  again), the best k others stay live.
- When to stop (§6.1 "terminate early when possible", as tensor2tensor's beam search, the
  code behind the paper's numbers, does it): a sentence stops at L, or when no live
  hypothesis can still beat the finished ones. Extending a hypothesis only lowers log P
  (≤ 0), so the best live one, with log-prob ℓ at length t, can at best score
  ℓ / max(lp(t+1), lp(L)) (for α ≥ 0 that is ℓ / lp(L), tensor2tensor's bound); the search
  stops once the worst finished hypothesis it keeps scores at least that.
- `early_stop=True` stops sooner, as soon as k hypotheses have finished (the rule of many
  toolkits, fast): a live hypothesis that would have won is then lost, so beam k can
  return a worse score than greedy (the demo's test sentence 92: four poor hypotheses
  finish first while the greedy path is still live). With early_stop, beam 1 is exactly
  greedy decoding; without it, beam 1 may go on past greedy's EOS and find a better score.
- `beam_search_nbest(..., nbest=K)` returns the K best finished hypotheses with their
  scores (K ≤ k). It keeps those K, so "the worst it keeps" is the K-th best (tensor2tensor
  keeps k and compares with the k-th; the returned list is the same, and ours stops no later).
  K = 1 is `beam_search`.

The model interface used here is small, so a stub can stand in for tests:
`model.config` (pad_id, bos_id, eos_id, max_len), `model.encode(src_ids)`,
`model.init_cache(src_ids, memory, beam)`, `model.decode_step(cache, tokens) -> logits (n, V)`,
`cache.reorder(rows)` (in place); `model.eval()/train()` when present.
Output token lists exclude BOS and EOS.
"""
from __future__ import annotations

import contextlib

import numpy as np

import minitensor as mt


def length_penalty(length, alpha: float):
    """§6.1 (GNMT): lp(|Y|) = ((5 + |Y|) / 6)^α."""
    return ((5.0 + np.asarray(length, dtype=np.float64)) / 6.0) ** alpha


def _max_lengths(model, src: np.ndarray, max_len_b: int) -> np.ndarray:
    src_len = (src != model.config.pad_id).sum(axis=1)                     # (B,)
    return np.minimum(src_len + max_len_b, model.config.max_len)           # §6.1: input length + max_len_b


@contextlib.contextmanager
def _inference(model):
    """no_grad and eval mode, restoring the model's training flag afterwards."""
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    try:
        with mt.no_grad():
            yield
    finally:
        if was_training:
            model.train()


def _log_probs(logits, config):
    """(n, V) logits (Tensor or array) -> (log-probs in float32 on the same device, xp).

    Padding and BOS are never outputs: they get log-prob −∞ (an untrained model would
    otherwise happily emit them).
    """
    if isinstance(logits, mt.Tensor):
        z, xp = logits.data, logits.backend.xp
    else:
        z, xp = logits, np
    z = z.astype(np.float32)
    m = z.max(axis=-1, keepdims=True)                                      # (n, 1)
    logp = z - (m + xp.log(xp.exp(z - m).sum(axis=-1, keepdims=True)))    # (n, V)
    logp[:, [config.pad_id, config.bos_id]] = -np.inf
    return logp, xp


def _to_host(array) -> np.ndarray:
    return array.get() if hasattr(array, "get") else np.asarray(array)


def greedy_decode(model, src_ids, max_len_b: int = 50) -> list[list[int]]:
    """The most probable next token at every step, for a batch of sentences (B, S) at once."""
    cfg = model.config
    src = _to_host(src_ids)
    limits = _max_lengths(model, src, max_len_b)                           # (B,)
    B = src.shape[0]
    outputs, done = [[] for _ in range(B)], np.zeros(B, dtype=bool)
    with _inference(model):
        memory = model.encode(src_ids)
        cache = model.init_cache(src_ids, memory, 1)
        tokens = np.full(B, cfg.bos_id, dtype=np.int64)                    # (B,)
        for step in range(int(limits.max(initial=0))):
            logp, xp = _log_probs(model.decode_step(cache, tokens), cfg)       # (B, V)
            tokens = _to_host(xp.argmax(logp, axis=-1)).astype(np.int64)  # (B,)
            for b in np.flatnonzero(~done):
                if tokens[b] == cfg.eos_id:
                    done[b] = True
                    continue
                outputs[b].append(int(tokens[b]))
                done[b] = step + 1 >= limits[b]
            if done.all():
                break
    return outputs


def beam_search(model, src_ids, beam: int = 4, alpha: float = 0.6, max_len_b: int = 50,
                early_stop: bool = False) -> list[list[int]]:
    """§6.1 beam search (k = beam) with lp(|Y|) = ((5+|Y|)/6)^α; returns the best finished hypothesis per sentence."""
    return best_of(beam_search_nbest(model, src_ids, beam, alpha, max_len_b, 1, early_stop))


def best_of(nbest_lists) -> list[list[int]]:
    """The tokens of the best hypothesis of each n-best list ([] where none finished)."""
    return [hyps[0][1] if hyps else [] for hyps in nbest_lists]


def _check_beam(beam: int, nbest: int) -> None:
    if beam < 1:
        raise ValueError(f"beam must be >= 1, got {beam}")
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest must be between 1 and the beam size {beam}, got {nbest}")


class _Finished:
    """Each sentence's finished hypotheses as (score, tokens), best first; the `nbest` best are kept."""

    def __init__(self, sentences: int, nbest: int):
        self.lists, self.nbest = [[] for _ in range(sentences)], nbest

    def add(self, b: int, score: float, tokens: list[int]) -> None:
        hyps = self.lists[b]
        hyps.append((score, tokens))
        hyps.sort(key=lambda entry: -entry[0])                             # stable: earlier wins ties
        del hyps[self.nbest:]

    def kth_best(self, b: int) -> float:
        """What a live hypothesis must beat: the worst one kept (−∞ until `nbest` have finished)."""
        hyps = self.lists[b]
        return hyps[self.nbest - 1][0] if len(hyps) >= self.nbest else -np.inf

    def results(self) -> list[list[tuple[float, list[int]]]]:
        return [[(float(score), tokens) for score, tokens in hyps] for hyps in self.lists]


def _stops(t: int, limits, best_live, kth_best, n_finished, beam: int, alpha: float, early_stop: bool):
    """Whether a sentence stops after step t (scalars, or arrays over sentences); best_live is −∞ when none is live.

    It stops at its length limit, when no hypothesis is live, with early_stop once `beam` have
    finished, else (§6.1 "terminate early when possible", tensor2tensor's rule) once the best
    live one cannot beat the finished ones even at its best: ℓ / max(lp(t+1), lp(L)).
    """
    bound = best_live / np.maximum(length_penalty(t + 1, alpha), length_penalty(limits, alpha))
    return (t >= limits) | (best_live == -np.inf) | (early_stop & (n_finished >= beam)) | (kth_best >= bound)


def beam_search_nbest(model, src_ids, beam: int = 4, alpha: float = 0.6, max_len_b: int = 50,
                      nbest: int = 1, early_stop: bool = False) -> list[list[tuple[float, list[int]]]]:
    """§6.1 beam search; per sentence the `nbest` best finished hypotheses as (score, tokens), best first.

    score = log P(Y | X) / lp(|Y|), the quantity the search ranks by (§6.1).
    early_stop: stop a sentence as soon as k hypotheses have finished (faster; see the module docstring).
    """
    _check_beam(beam, nbest)
    cfg, k = model.config, beam
    src = _to_host(src_ids)
    limits = _max_lengths(model, src, max_len_b)                           # (B,)
    B = src.shape[0]
    scores = np.full((B, k), -np.inf)                                      # (B, k) live log-probs, float64
    scores[:, 0] = 0.0                                                     # k identical starts: keep one
    history = np.zeros((B, k, 0), dtype=np.int64)                          # (B, k, t) tokens so far
    finished = _Finished(B, nbest)
    n_finished, done = np.zeros(B, dtype=int), np.zeros(B, dtype=bool)
    with _inference(model):
        memory = model.encode(src_ids)
        cache = model.init_cache(src_ids, memory, k)                       # rows b·k + j
        tokens = np.full(B * k, cfg.bos_id, dtype=np.int64)               # (n,)
        for t in range(1, int(limits.max(initial=0)) + 1):                # t = hypothesis length after this step
            logp, xp = _log_probs(model.decode_step(cache, tokens), cfg)       # (n, V)
            V = logp.shape[-1]
            total = logp.reshape(B, k, V) + xp.asarray(scores.astype(np.float32))[:, :, None]   # (B, k, V)
            total = total.reshape(B, k * V)                                # (B, k·V)
            width = min(2 * k, k * V)
            top = xp.argpartition(-total, width - 1, axis=1)[:, :width]    # (B, 2k) unordered
            top_vals = _to_host(xp.take_along_axis(total, top, axis=1)).astype(np.float64)
            top = _to_host(top)
            rows = np.arange(B * k).reshape(B, k)                          # default: rows stay (done sentences)
            new_scores, new_tokens = np.full((B, k), -np.inf), np.full((B, k), cfg.eos_id, dtype=np.int64)
            for b in np.flatnonzero(~done):
                order = np.argsort(-top_vals[b], kind="stable")
                live = []
                for rank, i in enumerate(order):
                    value, (parent, token) = top_vals[b, i], divmod(int(top[b, i]), V)
                    if value == -np.inf:
                        continue
                    if token == cfg.eos_id:
                        if rank < k:                                       # finished: frozen from now on
                            n_finished[b] += 1
                            finished.add(b, value / length_penalty(t, alpha), history[b, parent].tolist())  # §6.1
                    elif len(live) < k:
                        live.append((value, parent, token))
                for j, (value, parent, token) in enumerate(live):
                    rows[b, j], new_scores[b, j], new_tokens[b, j] = b * k + parent, value, token
                if t >= limits[b]:                                         # §6.1 max length: finish live ones as they are
                    for value, parent, token in live:
                        finished.add(b, value / length_penalty(t, alpha), history[b, parent].tolist() + [token])
                done[b] = _stops(t, limits[b], live[0][0] if live else -np.inf, finished.kth_best(b), n_finished[b],
                                 k, alpha, early_stop)
            if done.all():
                break
            parents = rows - np.arange(B)[:, None] * k                     # (B, k) parent beam of each new row
            history = np.concatenate([np.take_along_axis(history, parents[:, :, None], axis=1),
                                      new_tokens[:, :, None]], axis=2)     # (B, k, t) -> (B, k, t+1)
            scores = np.where(done[:, None], -np.inf, new_scores)
            tokens = new_tokens.reshape(-1)                                # (n,)
            cache.reorder(rows.reshape(-1))
    return finished.results()


def hypothesis_scores(model, src_ids, hyps: list[list[int]], alpha: float = 0.6, max_len_b: int = 50) -> np.ndarray:
    """The §6.1 score log P(Y | X) / lp(|Y|) of given outputs (no BOS/EOS), one teacher-forced pass.

    EOS is counted in |Y| and in P unless the output reached its length limit (the search
    then finishes it as it is). Log-probs as the search computes them (float32, no pad/BOS).
    """
    cfg = model.config
    src = _to_host(src_ids)
    limits = _max_lengths(model, src, max_len_b)                           # (B,)
    full = [list(y) + ([cfg.eos_id] if len(y) < limit else []) for y, limit in zip(hyps, limits)]
    T = max(1, max(len(y) for y in full))
    tgt_in = np.full((len(full), T), cfg.pad_id, dtype=np.int64)          # (B, T): BOS y_1 ... y_{T-1}
    tgt_out = np.full((len(full), T), cfg.pad_id, dtype=np.int64)         # (B, T): y_1 ... y_T
    for b, y in enumerate(full):
        tgt_in[b, :len(y)] = [cfg.bos_id] + y[:-1]
        tgt_out[b, :len(y)] = y
    with _inference(model):
        logits = model(src_ids, tgt_in)                                    # (B, T, V)
    logp, _ = _log_probs(_to_host(logits.data).reshape(-1, logits.shape[-1]), cfg)   # (B·T, V)
    picked = np.take_along_axis(logp.reshape(len(full), T, -1), tgt_out[:, :, None], axis=2)[:, :, 0]
    lengths = np.array([len(y) for y in full])
    total = np.where(np.arange(T)[None, :] < lengths[:, None], picked.astype(np.float64), 0.0).sum(axis=1)
    return total / length_penalty(lengths, alpha)
