"""Solutions to chapter 16's exercises (checked by `check_write_safetensors`, `check_clipping_counterexample`)
and the answer key PREDICT."""
import json

import numpy as np

CODES = {"float32": "F32", "float64": "F64", "int64": "I64"}


def write_safetensors(path, tensors):
    """8-byte little-endian header length, the JSON header padded with spaces to a multiple of 8, then
    every tensor's raw little-endian C-order bytes at the offsets the header gives."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        array = np.ascontiguousarray(tensors[name])
        array = array.astype(array.dtype.newbyteorder("<"), copy=False)
        header[name] = {"dtype": CODES[array.dtype.name], "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        blobs.append(array.tobytes())
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def clipping_counterexample():
    """One micro-batch with a huge gradient along x, one with a small one along y, bound 1. Clipping each
    first shrinks the big one to norm 1, so the y direction counts as much as x (cosine ≈ 0.71 with the
    other result); clipping the sum keeps the sum's direction, almost pure x."""
    return [100.0, 0.0], [0.0, 1.0], 1.0


PREDICT = """Exercise 1. The learning rate (Adam's restored step count sets it through Eq. (3)) and the batch
read (Progress.step picks it) are identical. The dropout masks are not: every Dropout draws its seed from the
generator whose state was not restored. So the very next update already differs, and the weights drift
apart from the uninterrupted run (in section 4 they differ after the first resumed step)."""
