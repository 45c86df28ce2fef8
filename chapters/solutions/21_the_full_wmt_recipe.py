"""Solutions to chapter 21's exercises (checked by `check_ids_bytes`, `check_split_compounds`) and the answer
key PREDICT."""
import re


def ids_bytes(n_tokens, n_pairs, vocab_size):
    """uint16 ids (2 bytes) while every id fits in 0..65535, else int32 (4 bytes); each side's offsets array
    is int64 with one entry more than there are sentences (sentence i is ids[offsets[i]:offsets[i + 1]])."""
    token_bytes = 2 if vocab_size <= 1 << 16 else 4
    return token_bytes * n_tokens + 2 * (n_pairs + 1) * 8


_COMPOUND = re.compile(r"(\S)-(\S)")


def split_compounds(line):
    """perl's s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g: left to right, matches do not overlap, so in 'a-b-c' the 'b'
    belongs to the first match and the second hyphen stays ('a ##AT##-##AT## b-c'); a hyphen with a space on
    either side is not a compound."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


PREDICT = """Exercise 1. 70,000 pieces do not fit in uint16 (ids 0..65535), so the ids are stored as int32, 4 bytes a
token instead of 2. WMT14's ~256M tokens (57M per 1M pairs, x 4.5) then take ~0.96 GiB instead of ~0.48 GiB,
plus the same ~0.07 GiB of int64 offsets: ~1.0 GiB in all instead of ~0.55 GiB, about twice the disk and page
cache (and twice the bytes read per batch). A larger vocabulary also shortens the sentences a little (fewer,
longer pieces), which wins back only a few percent."""
