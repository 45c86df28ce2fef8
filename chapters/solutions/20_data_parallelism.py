"""Solutions to chapter 20's exercise (checked by `check_recursive_doubling`) and the answer key PREDICT."""


def recursive_doubling_all_reduce(net):
    """log2 n rounds; in round k worker w exchanges its whole (partial) sum with worker w XOR 2^k and both add.

    After round k every worker holds the sum over the 2^(k+1) workers that agree with it outside
    the lowest k+1 bits, so after log2 n rounds it holds the sum over all of them. Every message is
    the whole array: log2 n × the array per worker, against the ring's 2(n − 1)/n × it, but only
    log2 n latencies instead of 2(n − 1). Libraries pick by size: this for small messages, the ring
    (or a tree) for the large ones (gradients).
    """
    n = len(net.held)
    distance = 1
    while distance < n:
        net.step([(w, w ^ distance, slice(None)) for w in range(n)], add=True)   # everyone sends at once
        distance *= 2


PREDICT = """Exercise 1. 213M parameters in fp32 are ~855 MB of gradient (train.experiments.scale.parameter_count gives
214,245,376 for TransformerConfig.big(): 857 MB). With the ring on 8 GPUs each GPU sends 2(n − 1)/n = 1.75 times
that: ~1.5 GB per update. At 64 GB/s of bus bandwidth that is ~23 ms (plus 35 calls × 40 µs of latency for
25 MB buckets, ~1.4 ms), against a big-model step of several hundred ms on an H100, so most of it hides under
backward. On NVLink 4 (450 GB/s) it is ~3.3 ms."""
