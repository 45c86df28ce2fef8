"""Batch translation: text lines in, text lines out, in the input's order (§6.1 decoding).

Steps: tokenize every line, sort by length (so a batch pads little), cut into
batches within a source-token budget (batching.make_batches, as for training),
decode each batch with beam search (beam 4, α = 0.6, at most input + 50 tokens,
§6.1) or greedily (beam 1), detokenize, and put the outputs back in input order. An empty input line
translates to an empty line, so output and input always pair up.

Shapes: B sentences in a batch, S source length.
"""

from collections.abc import Sequence

import minitensor as mt
from train.batching import make_batches, pad_batch
from train.errors import InputError
from transformer.search import beam_search, greedy_decode


def translate_ids(model, sources: Sequence[Sequence[int]], beam: int = 4, alpha: float = 0.6,
                  max_len_b: int = 50, max_tokens: int = 4096) -> list[list[int]]:
    """Token ids out (no BOS/EOS) for token ids in (no EOS: it is appended here), same order.

    The model is put in eval mode (no dropout) and restored afterwards.
    """
    eos, pad = model.config.eos_id, model.config.pad_id
    with_eos = [list(s) + [eos] for s in sources]
    lengths = [len(s) for s in with_eos]
    budget = max(max_tokens, max(lengths, default=1))                   # a sentence longer than the budget goes alone
    outputs: list[list[int]] = [[] for _ in sources]
    was_training = model.training
    model.eval()
    try:
        with mt.no_grad():
            for batch in make_batches(lengths, lengths, budget, max_sentences=256):
                src = pad_batch([with_eos[i] for i in batch], pad)  # (B, S)
                if beam > 1:
                    hyps = beam_search(model, src, beam=beam, alpha=alpha, max_len_b=max_len_b)
                else:
                    hyps = greedy_decode(model, src, max_len_b=max_len_b)
                for i, hyp in zip(batch, hyps):
                    outputs[i] = [int(t) for t in hyp]
    finally:
        model.train(was_training)
    return outputs


def translate_lines(model, tokenizer, lines: Sequence[str], beam: int = 4, alpha: float = 0.6,
                    max_len_b: int = 50, max_tokens: int = 4096, where: str = "input") -> list[str]:
    """Translate sentences; returns one output line per input line, in order.

    Raises InputError when there is nothing to translate, or when a sentence is
    longer than the model's positional table allows.
    """
    if not lines:
        raise InputError(f"{where}: empty input, nothing to translate")
    keep = [i for i, line in enumerate(lines) if line.strip()]
    if not keep:
        raise InputError(f"{where}: every line is empty, nothing to translate")
    ids = tokenizer.encode_batch([lines[i].strip() for i in keep])
    limit = model.config.max_len - 1  # one position for EOS
    for i, seq in zip(keep, ids):
        if len(seq) > limit:
            raise InputError(f"{where}:{i + 1}: {len(seq)} subword tokens, more than the model's "
                             f"max_len - 1 = {limit}")
    out_ids = translate_ids(model, ids, beam=beam, alpha=alpha, max_len_b=max_len_b, max_tokens=max_tokens)
    outputs = [""] * len(lines)
    for i, hyp in zip(keep, out_ids):
        outputs[i] = tokenizer.decode(hyp)
    return outputs


def read_stdin_lines(stream, where: str = "<stdin>") -> list[str]:
    """Lines of a binary stream decoded as UTF-8; a bad byte is an InputError naming its line."""
    lines = []
    for number, raw in enumerate(stream, start=1):
        try:
            lines.append(raw.decode("utf-8").rstrip("\r\n"))
        except UnicodeDecodeError:
            raise InputError(f"{where}:{number}: not valid UTF-8") from None
    return lines


__all__ = ["translate_ids", "translate_lines", "read_stdin_lines"]
