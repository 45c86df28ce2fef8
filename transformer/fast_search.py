"""Greedy decoding and beam search on the CPU, fast: transformer/search.py's searches, the same outputs (§6.1).

search.py is the spec (the chapters teach it); this file makes the same decisions on
the same numbers, and tests/transformer/test_fast_search.py holds the two to equal
outputs. Where search.py spends the time on a CPU, and what is done here instead:

- the encoder and each decoder step run on the model's arrays directly (the same weights,
  BLAS matmuls), one 2-D matmul per projection, not Tensor ops;
- keys and values go into an arena that only grows (decode_kernels.py): no concatenation
  per step, and beam search reorders hypotheses by copying (P,) index rows, not the
  (P, D) keys and values of every layer;
- the encoder's self-attention runs per sentence and head as two batched BLAS products with the masked
  softmax between them (encoder_attention.py);
- encoder-decoder keys/values are projected once per sentence and shared by its k beams;
- one kernel does the log-softmax and the top 2k of each row (decode_kernels.py);
- the bookkeeping is vectorised over sentences (search.py loops over them in Python);
- a sentence that is done leaves the batch; search.py carries it to the end;
- every product and kernel writes into scratch arrays that the steps, and the next batch, reuse
  (`_Decoder._scratch`): fresh memory costs a page fault per 4 KiB (measured: 2-30x fewer faults
  and a third to a half of the kernel-mode time); a finished search leaves its scratch to the next
  one, so a process keeps one set per thread that decoded;
- everything runs in the calling thread and the kernels release the GIL, so several threads can
  each decode a batch of their own (train/evaluate/translate.py) without waiting for each other.

`supports(model)` says whether a model can run here (NumPy arrays, float32 or float64
activations); train/evaluate/translate.py uses these searches then, search.py otherwise.

Shapes: B sentences, k beam, n = rows being decoded, S source length, D = d_model, V vocab.
"""
from __future__ import annotations

import numpy as np

from . import decode_kernels, encoder_attention
from .search import _check_beam, _Finished, _inference, _max_lengths, _stops, _to_host, best_of, length_penalty


def supports(model) -> bool:
    """True when the model's arrays are NumPy arrays and its activations float32 or float64."""
    backend = getattr(model, "backend", None)
    return (backend is not None and backend.xp is np and model.compute_dtype == model.param_dtype
            and np.dtype(model.compute_dtype) in (np.float32, np.float64))


def _weight_and_bias(*layers):
    """(W, b) of projections of one input side by side (§3.2.2's Q, K, V: one product makes all three)."""
    weights = [layer.weight.data for layer in layers]
    biases = [layer.bias.data if layer.bias is not None else np.zeros(w.shape[1], w.dtype)
              for layer, w in zip(layers, weights)]
    return (np.concatenate(weights, axis=1) if len(layers) > 1 else weights[0]), np.concatenate(biases)


class _Layer:
    """An encoder or decoder layer's arrays as a step uses them, gathered once per batch. The biases
    stay apart: the kernel that reads a product adds its bias (fewer calls a step)."""

    def __init__(self, layer):
        attn, ffn = layer.self_attn, layer.feed_forward
        self.qkv, self.out = _weight_and_bias(attn.w_q, attn.w_k, attn.w_v), _weight_and_bias(attn.w_o)
        self.ff1, self.ff2 = _weight_and_bias(ffn.w_1), _weight_and_bias(ffn.w_2)
        cross = getattr(layer, "cross_attn", None)
        if cross is not None:
            self.cross_q, self.cross_out = _weight_and_bias(cross.w_q), _weight_and_bias(cross.w_o)
            self.cross_kv = _weight_and_bias(cross.w_k, cross.w_v)
        self.norms = [connection.norm for connection in layer.sublayers]   # self-attention, [cross,] FFN


_idle_scratch: list[dict] = []     # scratch arrays of finished decoders, for the next ones (one set per thread)


class _Decoder:
    """Figure 1's encoder once, then its decoder one position at a time for n rows, on raw arrays.

    `step(tokens)` feeds each row its next token (BOS first) and returns the log-softmax's
    best `width` tokens per row; `keep(rows)` makes row i of the next step continue the
    hypothesis of row rows[i] (beam search's reordering; dropping done sentences too).
    """

    def __init__(self, model, src_ids, beam: int, steps: int):
        cfg = model.config
        self.model, self.heads, self.pre_norm = model, cfg.h, cfg.norm == "pre"
        src = _to_host(src_ids)
        self.buffers = _idle_scratch.pop() if _idle_scratch else {}        # scratch arrays by name (_scratch)
        self.valid = np.ascontiguousarray(src != cfg.pad_id)               # (B, S): not padding
        memory = self._encode(src)                                         # (B, S, D)
        B, S, D = memory.shape
        self.layers = [_Layer(layer) for layer in model.decoder.layers]
        flat, self.cross = memory.reshape(B * S, D), []                    # §3.2.3: once per sentence
        for layer in self.layers:
            w, b = layer.cross_kv
            kv = flat @ w                                                  # (B·S, 2D): K and V in one product
            kv += b
            self.cross.append([np.ascontiguousarray(kv[:, j * D:(j + 1) * D]).reshape(B, S, D) for j in (0, 1)])
        self.sentence = np.repeat(np.arange(B), beam)                      # (n,) sentence of each row
        self.positions = 0                                                 # P: positions decoded so far
        self.all_rows = np.empty((B * beam, steps), dtype=np.int64)        # rows (n, P): arena row of each
        self.spare_rows = np.empty_like(self.all_rows)                     # position; keep() copies into spare
        self.fed = np.zeros(0, dtype=np.int64)                             # (R,) the token fed at each arena row
        self.keys = [np.zeros((0, D), memory.dtype) for _ in model.decoder.layers]   # (R, D) per layer
        self.values = [np.zeros((0, D), memory.dtype) for _ in model.decoder.layers]
        self.used = 0
        # §3.4's x Eᵀ with a contiguous (D, V) copy of Eᵀ: BLAS is faster on it than on the transposed view
        self.output = np.ascontiguousarray(model.embeddings.output_weight().data)
        self.banned = np.zeros(cfg.vocab_size, dtype=np.bool_)
        self.banned[[cfg.pad_id, cfg.bos_id]] = True                       # never generated (search.py)

    @property
    def rows(self):
        """(n, P): the arena row that holds position p of row i's hypothesis."""
        return self.all_rows[:len(self.sentence), :self.positions]

    def _scratch(self, name: str, n: int, width: int):
        """n rows of an array that every step reuses (the encoder's B·S rows first, then the decoder's
        fewer), and the next decoder after this one (done()). Fresh memory costs a page fault per 4 KiB
        written, and the threads of one process wait for each other's page faults."""
        array, dtype = self.buffers.get(name), self.model.compute_dtype
        if array is None or len(array) < n or array.shape[1] != width or array.dtype != dtype:
            array = self.buffers[name] = np.empty((n, width), dtype)
        return array[:n]

    def done(self) -> None:
        """The search is over: the scratch arrays go to the next decoder (translate's next batch)."""
        _idle_scratch.append(self.buffers)

    def _product(self, x, weight, name: str):
        """x @ weight into scratch `name`."""
        return np.matmul(x, weight, out=self._scratch(name, len(x), weight.shape[1]))

    def _embed(self, ids, table, positions, offset: int):
        """§3.4-§3.5: Embed(ids)·√d_model + PE[offset + t], as Transformer._into_stacks (no dropout: eval)."""
        weight = table.weight.data
        x = self._scratch("x", ids.size, weight.shape[1]).reshape(*ids.shape, -1)   # (..., D)
        np.multiply(weight[ids], self.model.embeddings.scale, out=x)
        x += positions.table.data[offset:offset + (ids.shape[1] if ids.ndim == 2 else 1)].astype(x.dtype)
        return x

    def _norm(self, x, norm):
        return decode_kernels.layernorm(x, norm.gamma.data, norm.beta.data, norm.eps,
                                        out=self._scratch("normed", *x.shape))

    def _input(self, x, norm):
        """What a sublayer reads: x; pre-norm (DEVIATION(§3.1)): LayerNorm(x)."""
        return self._norm(x, norm) if self.pre_norm else x

    def _residual(self, x, y, bias, norm) -> None:
        """In place: x becomes §3.1's LayerNorm(x + Sublayer(x)), Sublayer(x) = y + bias; pre-norm
        (DEVIATION(§3.1)): x + Sublayer(LayerNorm(x))."""
        if self.pre_norm:
            y += bias
            x += y
        else:
            decode_kernels.add_layernorm(x, y, bias, norm.gamma.data, norm.beta.data, norm.eps, out=x)

    def _feed_forward(self, x, layer) -> None:
        """In place: x and §3.3, Eq. (2)'s max(0, xW_1 + b_1)W_2 + b_2 as the last sublayer."""
        hidden = self._product(self._input(x, layer.norms[-1]), layer.ff1[0], "hidden")
        decode_kernels.bias_relu(hidden, layer.ff1[1])
        self._residual(x, self._product(hidden, layer.ff2[0], "projected"), layer.ff2[1], layer.norms[-1])

    def _encode(self, src):
        """The encoder stack (§3.1); self-attention per sentence and head as matrix products (encoder_attention.py)."""
        model = self.model
        B, S = src.shape
        x = self._embed(src, model.embeddings.table("src"), model.src_positions, 0).reshape(B * S, -1)
        for layer in map(_Layer, model.encoder.layers):
            (w, b), norm = layer.qkv, layer.norms[0]
            qkv = self._product(self._input(x, norm), w, "qkv")           # (B·S, 3D): Q, K, V raw
            scores = self._scratch("scores", B * self.heads * S, S)        # (B, H, S, S) inside
            heads = encoder_attention.encoder_attention(qkv, b, self.valid, self.heads, scores,
                                                        out=self._scratch("heads", B * S, x.shape[1]))
            self._residual(x, self._product(heads, layer.out[0], "projected"), layer.out[1], norm)   # §3.2.2
            self._feed_forward(x, layer)
        if self.pre_norm:
            x = self._norm(x, model.encoder.norm)                          # DEVIATION(§3.1): pre-norm's last norm
        return x.reshape(B, S, -1)

    def _arena_rows(self, n: int) -> slice:
        """n fresh arena rows. A full arena doubles, so a row costs O(1) however long the search; the rows
        in use are copied (ndarray.resize would also zero the new half, holding Python's lock)."""
        if self.used + n > len(self.fed):
            capacity = max(2 * len(self.fed), self.used + n, 16 * n)          # at first: 16 steps
            self.fed = self._grown(self.fed, capacity)
            self.keys = [self._grown(keys, capacity) for keys in self.keys]
            self.values = [self._grown(values, capacity) for values in self.values]
        self.used += n
        return slice(self.used - n, self.used)

    def _grown(self, array, capacity: int):
        """array with `capacity` rows, its first `used` rows copied."""
        grown = np.empty((capacity, *array.shape[1:]), array.dtype)
        grown[:self.used] = array[:self.used]
        return grown

    def step(self, tokens, width: int):
        """tokens (n,) at position P -> (log-probs (n, width), ids (n, width)), best first."""
        model = self.model
        fresh = self._arena_rows(len(tokens))
        self.fed[fresh] = tokens
        self.all_rows[:len(tokens), self.positions] = np.arange(fresh.start, fresh.stop)
        self.positions += 1
        x = self._embed(tokens, model.embeddings.table("tgt"), model.tgt_positions, self.positions - 1)
        n, D = x.shape
        for i, layer in enumerate(self.layers):
            norm = layer.norms[0]                                          # §3.2.3: positions ≤ P, cached
            heads = decode_kernels.self_attention_step(self._product(self._input(x, norm), layer.qkv[0], "qkv"),
                                                       layer.qkv[1], self.keys[i], self.values[i], fresh.start,
                                                       self.rows, self.heads, out=self._scratch("heads", n, D))
            self._residual(x, self._product(heads, layer.out[0], "projected"), layer.out[1], norm)
            (keys, values), norm = self.cross[i], layer.norms[1]          # §3.2.3: encoder-decoder attention
            heads = decode_kernels.cross_attention_step(self._product(self._input(x, norm), layer.cross_q[0], "q"),
                                                        layer.cross_q[1], keys, values, self.sentence, self.valid,
                                                        self.heads, out=self._scratch("heads", n, D))
            self._residual(x, self._product(heads, layer.cross_out[0], "projected"), layer.cross_out[1], norm)
            self._feed_forward(x, layer)
        if self.pre_norm:
            x = self._norm(x, model.decoder.norm)                          # DEVIATION(§3.1): pre-norm's last norm
        logits = self._product(x, self.output, "logits")                   # §3.4, (n, D) @ (D, V) -> (n, V)
        logits = logits.astype(np.float32, copy=False)                      # float32, as search.py
        return decode_kernels.log_softmax_topk(logits, width, self.banned)

    def keep(self, rows) -> None:
        """Row i continues the hypothesis of row rows[i]; rows not named are dropped."""
        np.take(self.rows, rows, axis=0, out=self.spare_rows[:len(rows), :self.positions], mode="clip")
        self.all_rows, self.spare_rows = self.spare_rows, self.all_rows   # (mode="clip": no temporary copy)
        self.sentence = self.sentence[rows]

    def tokens(self, row: int) -> list[int]:
        """The tokens row `row` has generated so far (the fed tokens after BOS)."""
        return self.fed[self.rows[row, 1:]].tolist()


def greedy_decode(model, src_ids, max_len_b: int = 50) -> list[list[int]]:
    """search.greedy_decode, fast: the most probable next token at every step."""
    cfg = model.config
    limits = _max_lengths(model, _to_host(src_ids), max_len_b)             # (B,)
    outputs = np.zeros((len(limits), int(limits.max(initial=0))), dtype=np.int64)   # (B, L)
    lengths = np.zeros(len(limits), dtype=np.int64)                        # (B,) tokens generated
    with _inference(model):
        decoder = _Decoder(model, src_ids, 1, outputs.shape[1])
        active = np.arange(len(limits))                                    # the sentence of each row
        tokens = np.full(len(limits), cfg.bos_id, dtype=np.int64)
        for step in range(outputs.shape[1]):
            if not len(active):
                break
            _, best = decoder.step(tokens, 1)
            tokens = best[:, 0]                                            # (n,)
            said = tokens != cfg.eos_id
            outputs[active[said], step], lengths[active[said]] = tokens[said], step + 1
            going = said & (step + 1 < limits[active])
            decoder.keep(np.flatnonzero(going))
            active, tokens = active[going], tokens[going]
        decoder.done()
    return [row[:n].tolist() for row, n in zip(outputs, lengths)]


def beam_search(model, src_ids, beam: int = 4, alpha: float = 0.6, max_len_b: int = 50,
                early_stop: bool = False) -> list[list[int]]:
    """search.beam_search, fast: the best finished hypothesis per sentence."""
    return best_of(beam_search_nbest(model, src_ids, beam, alpha, max_len_b, 1, early_stop))


def beam_search_nbest(model, src_ids, beam: int = 4, alpha: float = 0.6, max_len_b: int = 50,
                      nbest: int = 1, early_stop: bool = False) -> list[list[tuple[float, list[int]]]]:
    """search.beam_search_nbest, fast: the `nbest` best (score, tokens) per sentence, best first."""
    _check_beam(beam, nbest)
    cfg, k = model.config, beam
    limits = _max_lengths(model, _to_host(src_ids), max_len_b)             # (B,)
    B = len(limits)
    row_width = min(2 * k, cfg.vocab_size)                                 # a row's best 2k hold the sentence's
    width = min(2 * k, k * row_width)
    finished = _Finished(B, nbest)
    n_finished = np.zeros(B, dtype=int)

    with _inference(model):
        decoder = _Decoder(model, src_ids, k, int(limits.max(initial=0)))
        active = np.arange(B)                                              # (Ba,) sentences still searching
        scores = np.full((B, k), -np.inf)                                  # (Ba, k) live log-probs
        scores[:, 0] = 0.0                                                 # k identical starts: keep one
        tokens = np.full(B * k, cfg.bos_id, dtype=np.int64)               # (Ba·k,)
        for t in range(1, int(limits.max(initial=0)) + 1):                # t = hypothesis length after this step
            if not len(active):
                break
            values, ids = decoder.step(tokens, row_width)                 # (n, 2k) each, best first
            Ba = len(active)
            total = (values.reshape(Ba, k, row_width) + scores.astype(np.float32)[:, :, None]).reshape(Ba, -1)
            order = np.argsort(-total, axis=1, kind="stable")[:, :width]   # (Ba, 2k): the sentence's best 2k
            top = np.take_along_axis(total, order, axis=1).astype(np.float64)
            parent = order // row_width                                    # (Ba, 2k) beam each came from
            token = np.take_along_axis(ids.reshape(Ba, -1), order, axis=1)
            possible, is_eos = top > -np.inf, token == cfg.eos_id
            ends = possible & is_eos & (np.arange(width) < k)              # an EOS among the first k finishes
            goes = possible & ~is_eos
            goes &= np.cumsum(goes, axis=1) <= k                           # the best k others stay live
            for a, c in zip(*np.nonzero(ends)):                            # §6.1 score, in rank order
                n_finished[active[a]] += 1
                finished.add(active[a], top[a, c] / length_penalty(t, alpha), decoder.tokens(a * k + parent[a, c]))
            slot_of = np.cumsum(goes, axis=1) - 1                          # live candidate -> its new row
            new_scores, new_tokens = np.full((Ba, k), -np.inf), np.full((Ba, k), cfg.eos_id, dtype=np.int64)
            rows = np.arange(Ba * k).reshape(Ba, k)                        # rows without a live one: unused
            a, c = np.nonzero(goes)
            new_scores[a, slot_of[a, c]], new_tokens[a, slot_of[a, c]] = top[a, c], token[a, c]
            rows[a, slot_of[a, c]] = a * k + parent[a, c]
            n_live = goes.sum(axis=1)
            at_limit = t >= limits[active]
            for a in np.flatnonzero(at_limit):                             # §6.1 max length: finish as they are
                for j in range(n_live[a]):
                    finished.add(active[a], new_scores[a, j] / length_penalty(t, alpha),
                                 decoder.tokens(rows[a, j]) + [int(new_tokens[a, j])])
            kth_best = np.array([finished.kth_best(b) for b in active])
            going = ~_stops(t, limits[active], new_scores[:, 0], kth_best, n_finished[active], k, alpha, early_stop)
            decoder.keep(rows[going].reshape(-1))
            active, scores = active[going], new_scores[going]
            tokens = new_tokens[going].reshape(-1)
        decoder.done()
    return finished.results()
