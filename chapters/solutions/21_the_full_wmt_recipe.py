"""Solutions to chapter 21's exercises (checked by `check_validate_prepared`, `check_split_compounds`) and the
answer key PREDICT."""
import re
from pathlib import Path

import numpy as np


def validate_prepared(folder, vocab_size):
    """The arrays a training run memory-maps must agree with each other: for each side, offsets that start at
    0, never decrease and end exactly at the last id (a copy cut short ends elsewhere); as many sentences on
    both sides; every id inside the vocabulary. Each check reads only the offsets and one max per side."""
    folder = Path(folder)
    arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r")
              for name in ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets")}
    for side in ("src", "tgt"):
        ids, offsets = arrays[f"{side}_ids"], arrays[f"{side}_offsets"]
        if len(offsets) == 0 or offsets[0] != 0:
            raise ValueError(f"{side}_offsets must start at 0")
        if np.any(np.diff(offsets) < 0):
            raise ValueError(f"{side}_offsets decrease: the sentences overlap")
        if offsets[-1] != len(ids):
            raise ValueError(f"{side}_offsets end at {offsets[-1]} but {side}_ids holds {len(ids)} ids (cut short?)")
        if len(ids) and int(ids.max()) >= vocab_size:
            raise ValueError(f"{side}_ids holds id {int(ids.max())}, outside the vocabulary of {vocab_size}")
    if len(arrays["src_offsets"]) != len(arrays["tgt_offsets"]):
        raise ValueError(f"{len(arrays['src_offsets']) - 1} source sentences but "
                         f"{len(arrays['tgt_offsets']) - 1} target sentences")


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
