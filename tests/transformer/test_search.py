"""transformer/search.py: greedy decoding and beam search with the GNMT length penalty (§6.1)."""
import itertools

import numpy as np
import pytest

from hypothesis import given
from hypothesis import strategies as st

from transformer.search import beam_search, beam_search_nbest, greedy_decode, hypothesis_scores, length_penalty
from transformer_helpers import random_ids, small_model

BOS, EOS, A, B = 2, 3, 4, 5


class StubConfig:
    pad_id, unk_id, bos_id, eos_id, max_len = 0, 1, BOS, EOS, 1000


class StubCache:
    """The generated tokens of each row; reorder() copies rows as the real cache does."""

    def __init__(self, prefixes, started=False):
        self.prefixes, self.started = prefixes, started

    def reorder(self, rows):
        self.prefixes = [self.prefixes[r] for r in rows]


class TreeModel:
    """A 'model' whose next-token distribution is a known function of the prefix: probs(prefix) -> {token: p}.

    V = 6: pad, unk, bos get (almost) nothing; EOS, A and B share the mass.
    """

    config = StubConfig()

    def __init__(self, probs):
        self.probs, self.steps = probs, 0

    def encode(self, src_ids):
        return None

    def init_cache(self, src_ids, memory, beam):
        return StubCache([() for _ in range(len(src_ids) * beam)])

    def decode_step(self, cache, tokens):
        self.steps += 1
        if cache.started:
            cache.prefixes = [p + (int(t),) for p, t in zip(cache.prefixes, tokens)]
        cache.started = True
        return np.stack([self.log_probs(p) for p in cache.prefixes])

    def log_probs(self, prefix):
        logp = np.full(6, -60.0)
        for token, p in self.probs(prefix).items():
            logp[token] = np.log(p)
        return logp

    def sequence_log_prob(self, tokens):
        return sum(self.log_probs(tuple(tokens[:i]))[t] for i, t in enumerate(tokens))


def brute_force_ranked(model, max_length, alpha):
    """Every hypothesis over {A, B} of at most max_length tokens (EOS included; cut ones end without EOS),
    as (score, tokens without EOS), best first."""
    ranked = []
    for n in range(max_length):
        for body in itertools.product([A, B], repeat=n):
            for tokens in ([*body, EOS], [*body, A], [*body, B]) if n == max_length - 1 else ([*body, EOS],):
                score = model.sequence_log_prob(tokens) / length_penalty(len(tokens), alpha)
                ranked.append((score, [t for t in tokens if t != EOS]))
    return sorted(ranked, key=lambda entry: -entry[0])


def brute_force_best(model, max_length, alpha):
    return brute_force_ranked(model, max_length, alpha)[0][1]


def table(entries, default):
    return lambda prefix: entries.get(prefix, default)


def test_length_penalty_formula():
    assert length_penalty(1, 0.6) == pytest.approx(1.0)
    assert length_penalty(7, 0.6) == pytest.approx(2.0 ** 0.6)     # ((5 + 7) / 6)^α
    assert length_penalty(10, 0.0) == 1.0


def test_beam_finds_what_greedy_misses():
    # greedy takes A (0.6) and then EOS: P = 0.24; beam 4 finds B EOS: P = 0.38
    probs = table({(): {A: 0.6, B: 0.4}, (A,): {EOS: 0.4, A: 0.3, B: 0.3}, (B,): {EOS: 0.95, A: 0.025, B: 0.025}},
                  {EOS: 0.9, A: 0.05, B: 0.05})
    src = np.array([[7]])
    assert greedy_decode(TreeModel(probs), src) == [[A]]
    assert beam_search(TreeModel(probs), src, beam=4) == [[B]]


def test_length_penalty_changes_the_winner():
    # [] has P = 0.5 (what greedy returns); [A, A] has P = 0.451 but a better score with α = 0.6:
    # log 0.5 / lp(1) = -0.693 < log 0.451 / lp(3) = -0.669
    probs = table({(): {EOS: 0.5, A: 0.48, B: 0.02}, (A,): {A: 0.95, EOS: 0.04, B: 0.01}}, {EOS: 0.99, A: 0.005, B: 0.005})
    src = np.array([[7]])
    assert greedy_decode(TreeModel(probs), src) == [[]]
    assert beam_search(TreeModel(probs), src, beam=4, alpha=0.6) == [[A, A]]
    assert beam_search(TreeModel(probs), src, beam=4, alpha=0.0) == [[]]


@pytest.mark.parametrize("seed", range(8))
def test_wide_beam_is_exact_search_under_the_length_penalty(seed):
    rng = np.random.default_rng(seed)
    cache = {}

    def probs(prefix):
        if prefix not in cache:
            p = rng.dirichlet([1.0, 1.0, 1.0])
            cache[prefix] = {EOS: p[0], A: p[1], B: p[2]}
        return cache[prefix]

    model = TreeModel(probs)
    src = np.array([[7]])                                  # max output length 1 + 2 = 3
    # beam 6 keeps every prefix over {A, B} up to length 2 with all their continuations ranked < 6: exhaustive
    best = brute_force_best(model, 3, 0.6)
    assert beam_search(model, src, beam=6, alpha=0.6, max_len_b=2) == [best]
    if seed == 0:
        assert greedy_decode(model, src, max_len_b=2) != [best], "this tree should defeat greedy search"


def test_search_stops_early_when_no_live_hypothesis_can_win():
    probs = table({(): {EOS: 0.99, A: 0.005, B: 0.005}}, {EOS: 0.5, A: 0.25, B: 0.25})
    model = TreeModel(probs)
    assert beam_search(model, np.array([[7]]), beam=4, max_len_b=50) == [[]]
    assert model.steps == 1, "log(0.005)/lp(51) cannot beat log(0.99): stop after one step"


def test_max_output_length_is_source_length_plus_max_len_b():
    never_ends = table({}, {EOS: 0.001, A: 0.599, B: 0.4})
    src = np.array([[7, 7, 7], [7, 0, 0]])                # 3 and 1 real source tokens
    assert [len(y) for y in greedy_decode(TreeModel(never_ends), src, max_len_b=4)] == [7, 5]
    assert [len(y) for y in beam_search(TreeModel(never_ends), src, beam=3, max_len_b=4)] == [7, 5]


@pytest.mark.parametrize("seed", range(3))
def test_beam_one_with_early_stop_equals_greedy_on_a_real_model(seed):
    model = small_model(backend="numpy", seed=seed, vocab_size=9)
    src = random_ids(np.random.default_rng(seed), 4, 5, 9, lengths=[5, 3, 4, 1])
    model.train()
    greedy = greedy_decode(model, src, max_len_b=6)
    assert beam_search(model, src, beam=1, max_len_b=6, early_stop=True) == greedy
    assert model.training, "search restores the training flag"
    searched = hypothesis_scores(model, src, beam_search(model, src, beam=1, max_len_b=6), max_len_b=6)
    assert np.all(searched >= hypothesis_scores(model, src, greedy, max_len_b=6) - 1e-5), \
        "without early_stop, beam 1 goes on past greedy's EOS only to find something better"


def test_batched_beam_search_equals_one_sentence_at_a_time(backend):
    model = small_model(backend=backend, seed=5, vocab_size=9)
    src = random_ids(np.random.default_rng(5), 3, 5, 9, lengths=[5, 2, 4])
    batched = beam_search(model, src, beam=3, max_len_b=5)
    single = [beam_search(model, src[i:i + 1, :n], beam=3, max_len_b=5)[0] for i, n in enumerate([5, 2, 4])]
    assert batched == single
    assert all(BOS not in y and EOS not in y and 0 not in y for y in batched)


def random_tree(seed):
    rng, cache = np.random.default_rng(seed), {}

    def probs(prefix):
        if prefix not in cache:
            p = rng.dirichlet([1.0, 1.0, 1.0])
            cache[prefix] = {EOS: p[0], A: p[1], B: p[2]}
        return cache[prefix]
    return TreeModel(probs)


@pytest.mark.parametrize("seed", range(6))
def test_wide_beam_nbest_is_the_exact_k_best_with_scores(seed):
    """With a beam wide enough to keep every prefix, the n-best list is the exhaustive ranking's top K."""
    model, src = random_tree(seed), np.array([[7]])      # max output length 1 + 2 = 3: 14 hypotheses
    ranked = brute_force_ranked(model, 3, 0.6)
    got = beam_search_nbest(model, src, beam=6, alpha=0.6, max_len_b=2, nbest=5)[0]
    assert [tokens for _, tokens in got] == [tokens for _, tokens in ranked[:5]]
    np.testing.assert_allclose([score for score, _ in got], [score for score, _ in ranked[:5]], rtol=1e-6)


def test_nbest_one_is_beam_search_and_lists_are_sorted_and_distinct():
    model = small_model(backend="numpy", seed=3, vocab_size=9)
    src = random_ids(np.random.default_rng(3), 3, 5, 9, lengths=[5, 2, 4])
    best = beam_search(model, src, beam=4, max_len_b=5)
    lists = beam_search_nbest(model, src, beam=4, max_len_b=5, nbest=3)
    assert [hyps[0][1] for hyps in beam_search_nbest(model, src, beam=4, max_len_b=5, nbest=1)] == best
    for hyps, top in zip(lists, best):
        assert len(hyps) == 3 and hyps[0][1] == top
        assert [s for s, _ in hyps] == sorted((s for s, _ in hyps), reverse=True)
        assert len({tuple(t) for _, t in hyps}) == 3
    with pytest.raises(ValueError, match="nbest must be between 1 and the beam size 2"):
        beam_search_nbest(model, src, beam=2, nbest=3)


def test_nbest_waits_for_k_finished_before_stopping_early():
    """The early stop of test_search_stops_early... would end after one step with one finished hypothesis;
    asking for 3 keeps searching until the 3rd best cannot be beaten."""
    probs = table({(): {EOS: 0.99, A: 0.005, B: 0.005}}, {EOS: 0.5, A: 0.25, B: 0.25})
    hyps = beam_search_nbest(TreeModel(probs), np.array([[7]]), beam=4, max_len_b=50, nbest=3)[0]
    assert [tokens for _, tokens in hyps] == [[], [A], [B]]
    assert hyps[1][0] == pytest.approx(np.log(0.005 * 0.5) / length_penalty(2, 0.6))


def greedy_path_with_four_early_finishes():
    """The demo's test sentence 92 in miniature. The right output, A A A A A, is likely at every step
    (0.9 each, then EOS 0.9: log P = -0.63). At each of its prefixes B branches off (0.1) and ends at once
    (EOS 0.9): each of those poor hypotheses ranks among the best 4 candidates and finishes, so 4 have
    finished after step 5, before the right one ends at step 6."""
    def probs(prefix):
        if prefix and prefix[-1] == B:
            return {EOS: 0.9, A: 0.05, B: 0.05}
        if prefix == (A,) * 5:
            return {EOS: 0.9, A: 0.05, B: 0.05}
        return {A: 0.9, B: 0.1}
    return probs


def test_four_early_finishes_do_not_end_the_search():
    """Beam 4 must not return "zwanzig" (score -3.78) where greedy finds "zwölf" (-0.43) just because four poor
    hypotheses finished while the greedy path was still live. Decoding goes on until no live hypothesis
    can beat a finished one (tensor2tensor's rule), so beam 4 is never below greedy here."""
    probs, src = greedy_path_with_four_early_finishes(), np.array([[7, 7, 7]])
    greedy = greedy_decode(TreeModel(probs), src)[0]
    assert greedy == [A] * 5
    best = beam_search_nbest(TreeModel(probs), src, beam=4)[0][0]
    assert best[1] == greedy
    assert best[0] == pytest.approx(TreeModel(probs).sequence_log_prob([A] * 5 + [EOS]) / length_penalty(6, 0.6))
    early = beam_search_nbest(TreeModel(probs), src, beam=4, early_stop=True)[0][0]
    assert early[1] != greedy and early[0] < best[0] - 1.0, "early_stop keeps the rule: 4 finished, stop"


@given(seed=st.integers(0, 2**31), k=st.integers(1, 4), alpha=st.sampled_from([0.0, 0.6, 1.5]))
def test_stopping_later_never_scores_lower(seed, k, alpha):
    """Both rules extend the same live hypotheses (finishing one never changes which stay live); the
    tensor2tensor rule only decodes more steps, so its best finished score is at least early_stop's, and
    the two differ only where it found something strictly better. At k = 1 that includes greedy's output."""
    model, src = random_tree(seed), np.array([[7, 7]])
    full = beam_search_nbest(model, src, beam=k, alpha=alpha, max_len_b=4)[0][0]
    early = beam_search_nbest(model, src, beam=k, alpha=alpha, max_len_b=4, early_stop=True)[0][0]
    assert full[0] >= early[0] - 1e-6
    assert full[1] == early[1] or full[0] > early[0] + 1e-7
    if k == 1:
        greedy = greedy_decode(model, src, max_len_b=4)[0]
        ended = greedy + ([EOS] if len(greedy) < 6 else [])
        assert full[0] >= model.sequence_log_prob(ended) / length_penalty(len(ended), alpha) - 1e-5


def test_hypothesis_scores_are_the_scores_the_search_ranks_by():
    """One teacher-forced pass gives log P(Y | X) / lp(|Y|) as beam search computed it step by step,
    EOS counted, except for outputs cut at the length limit."""
    model = small_model(backend="numpy", seed=4, vocab_size=9)
    src = random_ids(np.random.default_rng(4), 4, 5, 9, lengths=[5, 3, 4, 1])
    hyps = beam_search_nbest(model, src, beam=3, max_len_b=4, nbest=3)
    flat = [(b, score, tokens) for b, ranked in enumerate(hyps) for score, tokens in ranked]
    rescored = [hypothesis_scores(model, src[b:b + 1], [tokens], max_len_b=4)[0] for b, _, tokens in flat]
    np.testing.assert_allclose(rescored, [score for _, score, _ in flat], rtol=1e-5)
    limits = (src != 0).sum(axis=1) + 4
    assert any(len(tokens) == limits[b] for b, _, tokens in flat), "a hypothesis cut at the limit (no EOS) is scored"
    assert any(len(tokens) < limits[b] for b, _, tokens in flat), "and one that ended with EOS"
