"""Token-budget batches of sentence pairs of similar length (§5.1).

§5.1: "Sentence pairs were batched together by approximate sequence length.
Each training batch contained a set of sentence pairs containing
approximately 25000 source tokens and 25000 target tokens."

We count tokens the way the hardware pays for them: a batch of B pairs costs
B * max_len_in_batch on each side (the padded tensor, B x S and B x T), and
both sides must fit in `max_tokens` (fairseq's `--max-tokens`, also padded).
Sorting by length first makes the padding small: on realistic lengths more
than 90% of the padded positions hold real tokens.

Lengths are whatever the model will see: add 1 for an appended EOS or a
prepended BOS before calling `make_batches`.

Shapes: B pairs in a batch, L the longest sequence in it.
"""

from collections.abc import Sequence

import numpy as np

from train.errors import InputError


def make_batches(src_lengths: Sequence[int] | np.ndarray, tgt_lengths: Sequence[int] | np.ndarray,
                 max_tokens: int, seed: int = 0, max_sentences: int | None = None,
                 ) -> list[np.ndarray]:
    """Split pair indices into batches of similar length within a padded token budget.

    Pairs are sorted by (max(source, target) length, source length, target
    length), ties broken by a shuffle seeded with `seed` so equal-length pairs
    are not always grouped the same way, then taken in order greedily: a batch
    closes when one more pair would make B * max(src) or B * max(tgt) exceed
    `max_tokens` (or B exceed `max_sentences`). Returns a list of int64 index
    arrays covering every pair exactly once, in sorted order; shuffle them per
    epoch with `epoch_batches`.

    Why the longer side first: a batch is limited by its longer side, so
    sorting by it packs more pairs per batch. Sorting by (target, source)
    leaves source lengths spread within a batch once a batch spans several
    target lengths: on 50k WMT-like pairs at 25,000 tokens it gives 81 batches
    with 65% source efficiency, against 60 batches and 89% here.
    """
    src = np.asarray(src_lengths, dtype=np.int64)  # (n,)
    tgt = np.asarray(tgt_lengths, dtype=np.int64)  # (n,)
    if src.shape != tgt.shape or src.ndim != 1:
        raise ValueError(f"src_lengths and tgt_lengths must be 1-D of equal length, "
                         f"got {src.shape} and {tgt.shape}")
    if max_tokens <= 0:
        raise InputError(f"max_tokens must be positive, got {max_tokens}")
    if max_sentences is not None and max_sentences <= 0:
        raise InputError(f"max_sentences must be positive, got {max_sentences}")
    longest = int(np.argmax(np.maximum(src, tgt))) if len(src) else 0
    if len(src) and max(src[longest], tgt[longest]) > max_tokens:
        raise InputError(
            f"sentence pair {longest} has {src[longest]} source and {tgt[longest]} target tokens, "
            f"more than max_tokens={max_tokens} on its own; drop long pairs with "
            f"--set task.max_len=... or raise max_tokens")

    shuffled = np.random.default_rng(seed).permutation(len(src))
    longer = np.maximum(src, tgt)
    # lexsort is stable and sorts by its last key first: (longer, src, tgt); ties stay shuffled.
    order = shuffled[np.lexsort((tgt[shuffled], src[shuffled], longer[shuffled]))]
    cap = max_sentences if max_sentences is not None else len(src) + 1

    batches, start, max_src, max_tgt = [], 0, 0, 0
    src_sorted, tgt_sorted = src[order].tolist(), tgt[order].tolist()  # Python ints: fast loop
    for pos in range(len(order)):
        new_src = max(max_src, src_sorted[pos])
        new_tgt = max(max_tgt, tgt_sorted[pos])
        size = pos - start + 1
        if size > cap or size * new_src > max_tokens or size * new_tgt > max_tokens:
            batches.append(order[start:pos])
            start, new_src, new_tgt = pos, src_sorted[pos], tgt_sorted[pos]
        max_src, max_tgt = new_src, new_tgt
    if start < len(order):
        batches.append(order[start:])
    return batches


def epoch_batches(batches: list[np.ndarray], epoch: int, seed: int = 0) -> list[np.ndarray]:
    """The batches in a random order for this epoch; the same (seed, epoch) gives the same order.

    Shuffling whole batches keeps each batch's padding small while the model
    does not see lengths in increasing order.
    """
    order = np.random.default_rng((seed, epoch)).permutation(len(batches))
    return [batches[i] for i in order]


def shard(batches: Sequence, rank: int, world_size: int) -> list:
    """Rank `rank`'s share of one update's batches, taken from the global order: the rank-th block.

    Every rank gets ceil(n / world_size) entries, so every rank runs the same number of
    micro-batches and issues the same collectives; a share that runs short is padded with
    None, an empty batch (no loss, no tokens; train.run.step.train_step skips its forward and
    backward). Entry j of rank r is entry r * len(share) + j of the update: the micro-batches
    of k ranks, in rank order, are those of one process taking all of them.
    """
    per_rank = -(-len(batches) // world_size)
    mine = list(batches[rank * per_rank:(rank + 1) * per_rank])
    return mine + [None] * (per_rank - len(mine))


def pad_batch(seqs: Sequence[Sequence[int] | np.ndarray], pad_id: int,
              length: int | None = None) -> np.ndarray:
    """Stack sequences into a (B, L) int64 array, right-padded with `pad_id`.

    L is the longest sequence, or `length` if given (it must not be shorter).
    """
    longest = max((len(s) for s in seqs), default=0)
    width = longest if length is None else length
    if width < longest:
        raise ValueError(f"length={length} is shorter than the longest sequence ({longest})")
    out = np.full((len(seqs), width), pad_id, dtype=np.int64)  # (B, L)
    for row, seq in enumerate(seqs):
        out[row, :len(seq)] = seq
    return out


def padding_efficiency(batches: Sequence[np.ndarray], lengths: Sequence[int] | np.ndarray) -> float:
    """Real tokens / padded tokens over all batches, for one side (call once per side)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    real = sum(int(lengths[b].sum()) for b in batches)
    padded = sum(len(b) * int(lengths[b].max()) for b in batches if len(b))
    return real / padded if padded else 1.0
