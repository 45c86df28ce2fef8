# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 14 · Byte-pair encoding from scratch, and sentencepiece
#
# > We trained on the standard WMT 2014 English-German dataset consisting of about
# > 4.5 million sentence pairs. Sentences were encoded using byte-pair encoding,
# > which has a shared source-target vocabulary of about 37000 tokens. (§5.1)
#
# A word-level vocabulary of 37,000 would leave every rarer word unknown;
# characters would make sentences five times longer. Byte-pair encoding
# (Sennrich et al. 2016) sits between: start from characters and repeatedly
# **merge the most frequent adjacent pair** into a new symbol, until the
# vocabulary has the size you want. Frequent words end up as one token, rare
# ones as a few pieces, and nothing is ever out of vocabulary as long as its
# characters are known. German compounds ("dreihundertzweiundvierzig") are
# where it shines.
#
# We train BPE from scratch on the number task's sentences (both languages,
# one vocabulary: §3.4 ties the embeddings on it), encode with it, and compare
# with sentencepiece, the library the training pipeline uses
# (`train.data.tokenizer.Tokenizer`), trained on the same text with the same size.
#
# The library code this chapter builds:
# [`train/data/tokenizer.py`](../train/data/tokenizer.py).

# %%
from collections import Counter

import matplotlib.pyplot as plt
import numpy as np

from _common import OUT, fails, finish, show
from train.data.builtin_task import make_number_task
from train.data.tokenizer import Tokenizer

VOCAB_SIZE = 400                                               # 4 special ids + characters + merges
task = make_number_task(seed=0, n_train=3000, n_valid=10, n_test=200)   # the same text in --fast and full
corpus = [en for en, _ in task["train"]] + [de for _, de in task["train"]]
test = [en for en, _ in task["test"]] + [de for _, de in task["test"]]
print(corpus[0], "|", corpus[3000])

# %% [markdown]
# ## 1. Training: count pairs, merge the most frequent, repeat
#
# BPE works on words with their counts, not on running text: split each
# sentence at spaces, mark the start of each word with "▁" (sentencepiece's
# convention, which also lets decoding restore the spaces), and spell it out in
# characters. Then, for as many merges as the vocabulary has room for:
#
# 1. count every adjacent pair of symbols, each occurrence weighted by the word's count;
# 2. take the most frequent pair (ties: the larger pair in string order, any fixed rule works);
# 3. replace it everywhere by one new symbol, and remember the merge.
#
# The list of merges, in order, *is* the tokenizer.

# %%
def pair_counts(words):
    """{(a, b): how often symbol a is followed by symbol b}, over words {symbols: count}."""
    counts = Counter()
    for symbols, n in words.items():
        for pair in zip(symbols, symbols[1:]):
            counts[pair] += n
    return counts


def merge_pair(symbols, pair):
    """The symbol tuple with every occurrence of `pair` (left to right) replaced by one symbol."""
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def train_bpe(sentences, vocab_size, n_special=4):
    """(merges, characters, tokens in the corpus after each merge)."""
    words = Counter("▁" + w for s in sentences for w in s.split())
    words = {tuple(w): n for w, n in words.items()}                # "▁acht" -> ("▁", "a", "c", "h", "t")
    characters = sorted({c for symbols in words for c in symbols})
    merges, tokens = [], [sum(len(s) * n for s, n in words.items())]
    for _ in range(vocab_size - n_special - len(characters)):
        counts = pair_counts(words)
        if not counts:
            break
        best = max(counts, key=lambda pair: (counts[pair], pair))
        merges.append(best)
        words = {merge_pair(symbols, best): n for symbols, n in words.items()}
        tokens.append(tokens[-1] - counts[best])                     # each merged occurrence saves one token
    return merges, characters, tokens


merges, characters, corpus_tokens = train_bpe(corpus, VOCAB_SIZE)
print(f"{len(characters)} characters + {len(merges)} merges; first merges:",
      ["".join(m) for m in merges[:12]])

# %% CHECK
words_check = {tuple("▁" + w): n for w, n in Counter(w for s in corpus for w in s.split()).items()}
first = pair_counts(words_check)
assert merges[0] == max(first, key=lambda p: (first[p], p)), "the first merge is the most frequent character pair"
assert corpus_tokens[0] == sum(len(w) + 1 for s in corpus for w in s.split()), "start: one token per character"
assert all(b < a for a, b in zip(corpus_tokens, corpus_tokens[1:])), "every merge shortens the corpus"

# %% [markdown]
# ## 2. Encoding new text
#
# To encode a word, spell it out and apply the learned merges **in the order
# they were learned**: repeatedly merge the adjacent pair whose merge came
# earliest, until no pair has a merge. For words seen in training this replays
# training exactly; for new words it finds the pieces the corpus made common.
# Decoding concatenates the pieces and turns "▁" back into spaces.

# %%
rank = {pair: i for i, pair in enumerate(merges)}


def encode_word(word):
    symbols = list("▁" + word)
    while len(symbols) > 1:
        ranked = [(rank.get(pair, len(rank)), i) for i, pair in enumerate(zip(symbols, symbols[1:]))]
        best_rank, i = min(ranked)
        if best_rank == len(rank):                                  # no adjacent pair was ever merged
            break
        symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
    return symbols


def encode(sentence):
    return [piece for word in sentence.split() for piece in encode_word(word)]


def decode(pieces):
    return "".join(pieces).replace("▁", " ").strip()


example = "es liegen dreihundertzweiundvierzig rote Äpfel auf dem Tisch"
print(encode(example))
print(encode_word("tausend"), "(a word the task never uses)")

# %% CHECK
assert all(decode(encode(s)) == s for s in test), "decode(encode(s)) must give s back"
assert set(encode_word("tausend")) <= set(characters) | {"".join(m) for m in merges}, "new words use known pieces"
assert len(encode("es liegen")) == 2, "frequent words are one token each"

# %% [markdown]
# ## 3. The same with sentencepiece
#
# sentencepiece (Kudo & Richardson 2018) implements BPE (and a unigram model)
# in C++, treats the space as the "▁" symbol as we did, keeps four special ids
# (pad 0, unk 1, bos 2, eos 3 in this repository), and ranks its pieces in the
# order they were merged. Trained on the same sentences with the same
# vocabulary size, its first merges should be ours, and it should compress the
# held-out text about as much.

# %%
sp = Tokenizer.train(corpus, OUT / "14_bpe", vocab_size=VOCAB_SIZE)
sp_pieces = [sp.processor.id_to_piece(i) for i in range(4, sp.vocab_size)]
ours_pieces = set(characters) | {"".join(m) for m in merges}
shared = len(ours_pieces & set(sp_pieces)) / len(ours_pieces | set(sp_pieces))
ours_len = np.mean([len(encode(s)) for s in test])
sp_len = np.mean([len(sp.pieces(s)) for s in test])
print("sentencepiece:", sp.pieces(example))
print(f"tokens per held-out sentence: ours {ours_len:.2f}, sentencepiece {sp_len:.2f}; "
      f"shared pieces (Jaccard) {shared:.2f}")

fig, ax = plt.subplots(figsize=(6, 3.5))
sizes = len(characters) + 4 + np.arange(len(corpus_tokens))
ax.plot(sizes, np.array(corpus_tokens) / len(corpus), label="our BPE, training corpus")
ax.plot([sp.vocab_size], [np.mean([len(sp.pieces(s)) for s in corpus])], "r*", ms=12, label="sentencepiece")
ax.set_xlabel("vocabulary size (specials + characters + merges)")
ax.set_ylabel("tokens per sentence")
ax.legend()
show(fig, "14_bpe_compression")

# %% CHECK
assert ["".join(m) for m in merges[:10]] == sp_pieces[:10], \
    f"the first merges should be sentencepiece's: {['' .join(m) for m in merges[:10]]} vs {sp_pieces[:10]}"
assert abs(ours_len / sp_len - 1) < 0.1, f"similar compression: {ours_len:.2f} vs {sp_len:.2f} tokens per sentence"
assert shared > 0.5, f"most pieces are shared: Jaccard {shared:.2f}"
assert ours_len < 0.5 * np.mean([len(s) + 1 for s in test]), "BPE halves the length of character-level text at least"

# %% [markdown]
# ## Summary
# - BPE learns an ordered list of merges: count adjacent pairs (weighted by word counts), merge the most frequent, repeat.
# - Encoding replays the merges in learned order, so frequent words become one token and unseen words split into known pieces.
# - sentencepiece's BPE learns the same first merges and compresses about as much; it adds speed, special ids and byte-exact decoding.
#
# ## Exercises
# 1. **Predict, then run.** What does our `encode_word` do with a word containing a character the corpus
#    never had, say "Café"? What does sentencepiece do? (Answer key: `PREDICT` in
#    `chapters/solutions/14_byte_pair_encoding.py`.)
# 2. Write `merges_needed(word, merges)`: how many of the first merges must be learned before `word` (a
#    training word, without "▁") encodes as **one** token, or None if it never does. Think about what
#    encoding a training word replays. `check_merges_needed(fn)` compares it with encoding under truncated
#    merge lists.
# 3. WordPiece (used for the paper's En-Fr vocabulary, §5.1) scores a pair by count(ab) / (count(a)·count(b))
#    instead of count(ab), where count(s) is how often symbol s occurs. Write `wordpiece_best_pair(words)` for
#    words {symbols: count}. `check_wordpiece_best_pair(fn)` compares it with a direct search.

# %%
FIXED_WORDS = ("es", "liegen", "Tisch", "dreihundert", "auf", "zweiundvierzig", "Äpfel")


def _merges_until_one_token(word):
    """The smallest n with one token under the first n merges (None: never), by learning the merges one by one."""
    symbols = tuple("▁" + word)
    for n, pair in enumerate(merges, start=1):
        symbols = merge_pair(symbols, pair)
        if len(symbols) == 1:
            return n
    return None


def check_merges_needed(merges_needed) -> None:
    """Exercise 2: the smallest n with one token under the first n merges (None: never), for fixed words and
    training words drawn afresh each call."""
    vocabulary = sorted({w for s in corpus for w in s.split()})
    drawn = [vocabulary[i] for i in np.random.default_rng().choice(len(vocabulary), size=5, replace=False)]
    for word in FIXED_WORDS + tuple(drawn):
        got, expected = merges_needed(word, merges), _merges_until_one_token(word)
        assert got == expected, f"{word!r}: {got}, expected {expected}"


def check_wordpiece_best_pair(wordpiece_best_pair) -> None:
    """Exercise 3: on this chapter's corpus after 30 merges and after a number of merges drawn afresh each call,
    against a search over all pairs."""
    for learned in (30, int(np.random.default_rng().integers(0, 80))):
        words = {tuple("▁" + w): n for w, n in Counter(w for s in corpus for w in s.split()).items()}
        for pair in merges[:learned]:
            words = {merge_pair(symbols, pair): n for symbols, n in words.items()}
        pairs, singles = pair_counts(words), Counter()
        for symbols, n in words.items():
            for symbol in symbols:
                singles[symbol] += n
        expected = max(pairs, key=lambda p: (pairs[p] / (singles[p[0]] * singles[p[1]]), p))
        score = lambda p: pairs[p] / (singles[p[0]] * singles[p[1]])             # noqa: E731
        got = tuple(wordpiece_best_pair(words))
        assert got in pairs and np.isclose(score(got), score(expected)), \
            f"after {learned} merges: {got} scores {score(got):.2e}, best is {expected} with {score(expected):.2e}"


# %% CHECK the checks: a wrong answer must fail them
assert fails(check_merges_needed, lambda word, ms: len(word)), "accepted the word length"
assert fails(check_wordpiece_best_pair, lambda words: max(pair_counts(words).items(), key=lambda kv: kv[1])[0]), \
    "accepted BPE's rule"


def _answers_for_the_fixed_words(word, ms):                           # a table: right for the fixed words only
    return {w: _merges_until_one_token(w) for w in FIXED_WORDS}.get(word, -1)


assert fails(check_merges_needed, _answers_for_the_fixed_words), "check_merges_needed accepted a table of fixed words"
# check_wordpiece_best_pair: any search over the pairs is a right method; its wrong answers are wrong scores (BPE's).

# %%
finish("14_byte_pair_encoding", {check_merges_needed: "merges_needed", check_wordpiece_best_pair: "wordpiece_best_pair"})
