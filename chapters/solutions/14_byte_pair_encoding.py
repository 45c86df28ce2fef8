"""Solutions to chapter 14's exercises (checked by `check_merges_needed`, `check_wordpiece_best_pair`)
and the answer key PREDICT."""
from collections import Counter


def merges_needed(word, merges):
    """Encoding a training word replays training: after learning merge n, the word's symbols are exactly
    what training had after merge n. So apply the merges one at a time and stop when one symbol is left."""
    symbols = ["▁", *word]
    for n, (a, b) in enumerate(merges, start=1):
        i, merged = 0, []
        while i < len(symbols):
            if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
                merged.append(a + b)
                i += 2
            else:
                merged.append(symbols[i])
                i += 1
        symbols = merged
        if len(symbols) == 1:
            return n
    return None


def wordpiece_best_pair(words):
    """The pair maximising count(ab) / (count(a) · count(b)): merges symbols that occur together far more
    often than their own frequencies predict, where BPE merges whatever is most frequent."""
    pairs, singles = Counter(), Counter()
    for symbols, n in words.items():
        for symbol in symbols:
            singles[symbol] += n
        for pair in zip(symbols, symbols[1:]):
            pairs[pair] += n
    return max(pairs, key=lambda p: (pairs[p] / (singles[p[0]] * singles[p[1]]), p))


PREDICT = """Exercise 1. "Café": neither 'C' nor 'é' occurs in the number task, so no merge involves them. Our
encode_word gives ['▁', 'C', 'a', 'f', 'é']: the known characters stay single (no merge joins them here) and
'C' and 'é' are symbols in no vocabulary, so a model would have no id for them (we would need an unknown id,
or bytes as the base alphabet). sentencepiece maps each unseen character to <unk> (id 1): pieces
['▁', 'C', 'a', 'f', 'é'] with ids [.., 1, .., .., 1], decoded as ' ⁇ af ⁇ '. Byte-level BPE avoids both
problems by starting from the 256 byte values instead of characters."""
