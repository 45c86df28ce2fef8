"""Solutions to chapter 22's exercises (checked by `check_crossing`, `check_well_formed`) and the answer key PREDICT."""


def crossing(gold_spans, test_spans):
    """A test bracket (t0, t1) crosses a gold one (g0, g1) when they overlap and neither holds the other:
    g0 < t0 < g1 < t1 or t0 < g0 < t1 < g1. Labels play no part; each test bracket counts once."""
    def crosses(g, t):
        return g[0] < t[0] < g[1] < t[1] or t[0] < g[0] < t[1] < g[1]
    return sum(any(crosses(g, t) for g in gold_spans) for t in test_spans)


def well_formed(tokens, n_words):
    """A stack of [label, holds a word]: an opener needs a label, a closer must match the innermost open
    bracket (or be a bare ')'), a bracket must hold a word when it closes, and at the end every bracket is
    closed and exactly n_words words were written."""
    stack, words = [], 0
    for token in tokens:
        if token.startswith("("):
            if len(token) == 1:
                return False
            stack.append([token[1:], False])
        elif token.startswith(")"):
            if not stack:
                return False
            label, has_word = stack.pop()
            if token[1:] not in ("", label) or not has_word:
                return False
            if stack:
                stack[-1][1] = True
        else:
            words += 1
            if words > n_words:
                return False
            if stack:
                stack[-1][1] = True
    return not stack and words == n_words


PREDICT = """Exercise 1. Each of the n words is one token and each of the b constituents two, its opener and its
closer: n + 2b tokens. A WSJ tree has a little under one constituent per word (about 0.8 here), so the output is
about 2.5-2.6 times the input (the chapter prints 2.5x-2.6x on the sample's test split) - the "significantly
longer than the input" of §6.3, and why §6.3 allows input + 300 tokens instead of input + 50."""
