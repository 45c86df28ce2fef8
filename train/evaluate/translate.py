"""Translation: text lines in, text lines out, in the input's order (§6.1 decoding).

Steps: tokenize every line, sort by length (so a batch pads little), cut into
batches within a source-token budget (batching.make_batches, as for training),
decode each batch with beam search (beam 4, α = 0.6, at most input + 50 tokens,
§6.1) or greedily (beam 1), detokenize, and put the outputs back in input order. An empty input line
translates to an empty line, so output and input always pair up: a line that is not
UTF-8 gives an empty output line and a warning naming it, a line longer than the model's
positions is cut to fit (and named), and every other line is translated. A file is
translated a chunk of lines at a time, and each chunk's output is written as it is done.
On the CPU the searches are transformer/fast_search.py's (the same outputs as
transformer/search.py's, several times faster), and the batches are shared among the threads
in force (train/threads.py: `cpu_threads`), each thread decoding whole batches on one BLAS
thread. Threads that split every product and kernel wait for each other many times a step,
and on a busy machine for whichever one another program holds: an untrained base model's
beam 4 on 64 sentences took 2x longer that way on a quiet machine, 5x with one busy program
beside it (docs/serving.md).

`translate_stream` does the same for a stream that a person or a program writes
line by line (stdin): it waits for one line, takes whatever else has already
arrived (up to a batch), translates that, and writes and flushes the outputs
before waiting again, so a line in gets its line out at once.

With `nbest` = K, each input line gets up to K lines `LINE<TAB>SCORE<TAB>TRANSLATION`
(LINE counts from 1, SCORE = log P(Y|X) / lp(|Y|), the §6.1 beam score, best first).

Shapes: B sentences in a batch, S source length.
"""

import gzip
import queue
import threading
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import minitensor as mt
from minitensor.backends.denormals import flush_denormals
from train.data.batching import make_batches, pad_batch
from train.data.files import iter_lines, no_file
from train.errors import InputError
from train.threads import cpu_threads, current_threads
from transformer import fast_search, search

CHUNK_LINES = 2000  # a file is translated (sorted by length, batched) and written this many lines at a time
MAX_SENTENCES = 1024  # sentences per decoding batch, at most
MIN_SHARED_TOKENS = 256  # shared among threads, a batch keeps at least this many source tokens


def length_batches(lengths: Sequence[int], max_tokens: int, workers: int = 1) -> list:
    """The decoding batches (lists of sentence indices) for sentences of these lengths, EOS included:
    sorted by length, at most max_tokens source tokens each, padding counted; a sentence longer than that
    goes alone. For `workers` threads, smaller where that gives each thread one batch (fewer, larger
    batches: fewer steps of Python, larger products), and no small batch left over to wait for."""
    def batches(budget):
        return make_batches(lengths, lengths, max(budget, max(lengths, default=1)), max_sentences=MAX_SENTENCES)

    budget = min(max_tokens, max(-(-sum(lengths) // workers), MIN_SHARED_TOKENS))
    while len(found := batches(budget)) > workers and budget < max_tokens:
        budget = min(max_tokens, budget + budget // 20 + 1)               # padding counts: a little more room
    return found


def _searches(model):
    """fast_search where the model runs on NumPy arrays (tests/transformer/test_fast_search.py: the same
    outputs), search.py elsewhere (the GPU)."""
    return fast_search if fast_search.supports(model) else search


def _decode_batches(model, sources: Sequence[Sequence[int]], decode: Callable, max_tokens: int,
                    on_batch: Callable[[int], None] | None, searches) -> list:
    """decode(src (B, S)) for every sentence, batched by length; results in input order. `searches`: the
    module `decode` searches with; fast_search's decode a batch per thread, search.py's in this thread (its
    Tensor ops, Numba's parallel kernels among them, must not run in several Python threads at once)."""
    eos, pad = model.config.eos_id, model.config.pad_id
    with_eos = [list(s) + [eos] for s in sources]
    lengths = [len(s) for s in with_eos]
    workers = current_threads() if searches is fast_search else 1
    outputs: list = [None] * len(sources)

    def decode_batch(batch):
        with flush_denormals():                   # per thread: a trained model's attention makes denormals
            return batch, decode(pad_batch([with_eos[i] for i in batch], pad))   # (B, S) in

    was_training = model.training
    model.eval()                                                           # for every thread, before any starts
    try:
        with mt.no_grad(), cpu_threads(1 if workers > 1 else 0):
            batches = length_batches(lengths, max_tokens, workers)[::-1]   # the longest first: they end together
            for batch, hyps in _as_done(decode_batch, batches, workers):
                for i, hyp in zip(batch, hyps):
                    outputs[i] = hyp
                if on_batch is not None:
                    on_batch(len(batch))
    finally:
        model.train(was_training)
    return outputs


def _as_done(fn: Callable, items: Sequence, workers: int):
    """fn(item) of every item, yielded as each is done: in this thread for one worker, else on `workers` threads."""
    if workers == 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(fn, item) for item in items]
        try:
            for done in as_completed(futures):
                yield done.result()
        finally:
            pool.shutdown(cancel_futures=True)                             # an error or ^C: start no more


def translate_ids(model, sources: Sequence[Sequence[int]], beam: int = 4, alpha: float = 0.6,
                  max_len_b: int = 50, max_tokens: int = 4096, on_batch: Callable[[int], None] | None = None,
                  early_stop: bool = False) -> list[list[int]]:
    """Token ids out (no BOS/EOS) for token ids in (no EOS: it is appended here), same order.

    The model is put in eval mode (no dropout) and restored afterwards; `on_batch(n)` is
    called after each batch of n sentences (a progress bar's update); `early_stop`: beam search
    stops a sentence once `beam` hypotheses finished (transformer/search.py).
    """
    searches = _searches(model)

    def decode(src):
        if beam > 1:
            return searches.beam_search(model, src, beam=beam, alpha=alpha, max_len_b=max_len_b, early_stop=early_stop)
        return searches.greedy_decode(model, src, max_len_b=max_len_b)
    return [[int(t) for t in hyp] for hyp in _decode_batches(model, sources, decode, max_tokens, on_batch, searches)]


def translate_ids_nbest(model, sources: Sequence[Sequence[int]], nbest: int, beam: int = 4, alpha: float = 0.6,
                        max_len_b: int = 50, max_tokens: int = 4096, on_batch: Callable[[int], None] | None = None,
                        early_stop: bool = False) -> list[list[tuple[float, list[int]]]]:
    """The `nbest` best (score, ids) per sentence, best first (beam search even at beam 1)."""
    searches = _searches(model)

    def decode(src):
        return searches.beam_search_nbest(model, src, beam=beam, alpha=alpha, max_len_b=max_len_b, nbest=nbest,
                                          early_stop=early_stop)
    return _decode_batches(model, sources, decode, max_tokens, on_batch, searches)


def _encode_lines(tokenizer, lines: Sequence[str], limit: int, where: str, first_line: int) -> tuple[list, list]:
    """(indices of non-empty lines, their ids); a line longer than the model's positions allow is cut to
    fit, with a warning naming it: its output is the translation of its first `limit` tokens."""
    keep = [i for i, line in enumerate(lines) if line.strip()]
    ids = tokenizer.encode_batch([lines[i].strip() for i in keep])
    for n, (i, seq) in enumerate(zip(keep, ids)):
        if len(seq) > limit:
            warnings.warn(f"{where}:{first_line + i}: {len(seq)} subword tokens, more than the model's max_len - 1 "
                          f"= {limit}; its output line translates the first {limit} only", stacklevel=3)
            ids[n] = seq[:limit]
    return keep, ids


def translate_lines(model, tokenizer, lines: Sequence[str], beam: int = 4, alpha: float = 0.6,
                    max_len_b: int = 50, max_tokens: int = 4096, where: str = "input", nbest: int = 0,
                    first_line: int = 1, on_batch: Callable[[int], None] | None = None,
                    early_stop: bool = False) -> list[str]:
    """Translate sentences; returns one output line per input line, in order (with `nbest`: the n-best
    records of every input line, see the module docstring; an empty line gives one record with score 0).

    Raises InputError when there is nothing to translate. A sentence longer than the model's
    positional table allows is cut to fit, with a warning naming its line.
    """
    if not lines:
        raise InputError(f"{where}: empty input, nothing to translate")
    keep, ids = _encode_lines(tokenizer, lines, model.config.max_len - 1, where, first_line)  # one position for EOS
    options = dict(beam=beam, alpha=alpha, max_len_b=max_len_b, max_tokens=max_tokens, on_batch=on_batch,
                   early_stop=early_stop)
    if not nbest:
        outputs = [""] * len(lines)
        for i, hyp in zip(keep, translate_ids(model, ids, **options) if keep else []):
            outputs[i] = tokenizer.decode(hyp)
        return outputs
    lists = [[(0.0, [])] for _ in lines]
    for i, hyps in zip(keep, translate_ids_nbest(model, ids, nbest, **options) if keep else []):
        lists[i] = hyps
    return [f"{first_line + i}\t{score:.4f}\t{tokenizer.decode(hyp)}"
            for i, hyps in enumerate(lists) for score, hyp in hyps]


def _read_lines(read: Callable[[int], bytes], lines: queue.Queue) -> None:
    """Reader thread: raw lines into the queue as they arrive, then None at the end.

    It reads with `read(n)` (os.read on stdin's descriptor), not through a buffered file:
    a thread still blocked in a buffered read when the program exits (after an error)
    makes the interpreter abort.
    """
    pending = b""
    try:
        while chunk := read(1 << 16):
            *complete, pending = (pending + chunk).split(b"\n")
            for raw in complete:
                lines.put(raw + b"\n")
        if pending:
            lines.put(pending)
    finally:
        lines.put(None)


def translate_stream(model, tokenizer, read: Callable[[int], bytes], write: Callable[[str], None],
                     where: str = "<stdin>", max_batch: int = 64, **options) -> int:
    """Translate a byte stream line by line as it arrives; `write(text)` gets each batch's output lines.

    `read(n)` returns up to n bytes, b"" at the end (e.g. `lambda n: os.read(0, n)`). Returns the
    number of lines read; an empty stream is an InputError, a line that is not UTF-8 an empty output
    line and a warning.
    `options` are translate_lines' (beam, alpha, max_len_b, max_tokens, nbest, early_stop).
    """
    arrived: queue.Queue = queue.Queue()
    threading.Thread(target=_read_lines, args=(read, arrived), daemon=True).start()
    n_read, ended = 0, False
    while not ended:
        batch = [arrived.get()]                                          # wait for one line ...
        while len(batch) < max_batch and batch[-1] is not None:
            try:
                batch.append(arrived.get_nowait())                       # ... and take what has already come
            except queue.Empty:
                break
        if batch[-1] is None:
            ended, batch = True, batch[:-1]
        texts = [decode_line(raw, where, n_read + i + 1) for i, raw in enumerate(batch)]
        if texts:
            outputs = translate_lines(model, tokenizer, texts, where=where, first_line=n_read + 1, **options)
            write("".join(line + "\n" for line in outputs))
        n_read += len(texts)
    if n_read == 0:
        raise InputError(f"{where}: empty input, nothing to translate")
    return n_read


def decode_line(raw: bytes, where: str, number: int) -> str:
    """A raw line as text without its line end; a line that is not UTF-8 is "" (its output line is
    empty), with a warning naming it: one bad line costs that line, not the whole input."""
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        warnings.warn(f"{where}:{number}: not valid UTF-8; its output line is empty", stacklevel=2)
        return ""


def read_source(path: Path) -> list[str]:
    """The lines of a file to translate (`.gz` is decompressed), each through decode_line."""
    path = Path(path)
    if not path.is_file():
        raise no_file(path)
    try:
        with (gzip.open if path.name.endswith(".gz") else open)(path, "rb") as f:
            return [decode_line(raw, str(path), number) for number, raw in enumerate(f, start=1)]
    except (gzip.BadGzipFile, EOFError) as err:
        raise InputError(f"{path}: not a readable gzip file ({err})") from None


def translate_in_chunks(model, tokenizer, lines: Sequence[str], write: Callable[[str], None],
                        chunk: int = CHUNK_LINES, **options) -> list[str]:
    """translate_lines over `lines` a chunk at a time, `write`-ing each chunk's output lines as soon as they
    are done (a killed or failed run keeps what it wrote); returns every output line."""
    if not lines:
        raise InputError(f"{options.get('where', 'input')}: empty input, nothing to translate")
    outputs = []
    for start in range(0, len(lines), chunk):
        done = translate_lines(model, tokenizer, lines[start:start + chunk], first_line=start + 1, **options)
        write("".join(line + "\n" for line in done))
        outputs += done
    return outputs


__all__ = ["translate_ids", "translate_ids_nbest", "translate_lines", "translate_stream", "translate_in_chunks",
           "decode_line", "read_source"]


def read_pairs(src: Path, ref: Path) -> tuple[list[str], list[str]]:
    """(sources, references) line by line: a bad reference is an error before anything is translated, a
    bad source line a warning and an empty hypothesis (read_source)."""
    refs = [line for _, line in iter_lines(ref)]
    sources = read_source(src)
    pair_up(src, sources, ref, refs)
    return sources, refs


def pair_up(first: Path, a: list[str], second: Path, b: list[str]) -> None:
    for path, lines in ((first, a), (second, b)):
        if not lines:
            raise InputError(f"{path}: empty file")
    if len(a) != len(b):
        raise InputError(f"{first} has {len(a)} lines but {second} has {len(b)}; they must pair up line by line")
