"""The `ptb` task (§6.3): Penn Treebank files -> parallel (words, linearised tree) text files.

§6.3 trains on "the Wall Street Journal (WSJ) portion of the Penn Treebank" (sections
02-21, about 40K sentences; section 23 is the test set, 22 the dev set). Treebank files
are named wsj_SSNN.mrg with SS the section, so a split is a range of file numbers:
sections 02-21 are 0200-2199. The default is the WSJ sample beside the project
(`../shared/data/ptb_sample/treebank.zip`, files 0001-0199: train 0001-0179, dev
0180-0189, test 0190-0199). The treebank is a `.zip` or a folder; files are found by
name anywhere inside it (`combined/` and `parsed/mrg/wsj/SS/` both work).

For each split, `split_files` makes three text files, which train/data/store.py stores
under the prepared data folder as `ptb-<hash of their content>/`:
    <split>.words   the sentence, words separated by spaces (the source side)
    <split>.tree    its linearised tree, train.parsing.trees.linearise (the target side)
    <split>.gold    the cleaned tree on one line, TOP-rooted: the gold file for EVALB
"""

import re
import zipfile
from pathlib import Path

from train.errors import InputError
from train.parsing.trees import clean, linearise, read_trees

SPLITS = ("train", "valid", "test")
_FILE_NAME = re.compile(r"(?:^|/)wsj_(\d{4})\.mrg$")


def parse_range(spec: str, key: str) -> tuple[int, int]:
    """'0200-2199' -> (200, 2199), the first and last file number of a split."""
    match = re.fullmatch(r"\s*(\d{1,4})\s*-\s*(\d{1,4})\s*", spec)
    if not match or int(match[1]) > int(match[2]):
        raise InputError(f"{key} = {spec!r}: expected FIRST-LAST treebank file numbers, "
                         f"e.g. '0200-2199' for WSJ sections 02-21")
    return int(match[1]), int(match[2])


def treebank_files(treebank: Path, first: int, last: int) -> list[tuple[str, bytes]]:
    """(name, bytes) of the wsj_NNNN.mrg files numbered first..last in a .zip or a folder, by name."""
    treebank = Path(treebank)
    if zipfile.is_zipfile(treebank):
        with zipfile.ZipFile(treebank) as archive:
            names = [n for n in archive.namelist() if _in_range(n, first, last)]
            files = [(f"{treebank}:{n}", archive.read(n)) for n in names]
    elif treebank.is_dir():
        paths = [p for p in treebank.rglob("wsj_*.mrg") if _in_range(p.as_posix(), first, last)]
        files = [(str(p), p.read_bytes()) for p in paths]
    else:
        raise InputError(f"{treebank}: treebank not found (a .zip or a folder of wsj_NNNN.mrg files)")
    if not files:
        raise InputError(f"{treebank}: no wsj_NNNN.mrg files numbered {first:04d}-{last:04d}")
    files.sort(key=lambda item: _FILE_NAME.search(item[0])[1])
    for (a, _), (b, _) in zip(files, files[1:]):
        if _FILE_NAME.search(a)[1] == _FILE_NAME.search(b)[1]:
            raise InputError(f"{treebank}: two files with the same number, {a} and {b}; point task.treebank "
                             f"at the folder that holds one copy")
    return files


def _in_range(name: str, first: int, last: int) -> bool:
    match = _FILE_NAME.search(name)
    return match is not None and first <= int(match[1]) <= last


def split_files(treebank: Path, ranges: dict[str, str]) -> dict[str, bytes]:
    """The text files of the three splits: {"train.words": ..., "train.tree": ..., "train.gold": ..., ...}.

    `ranges` maps each split to its file-number range, e.g. {"train": "0001-0179", ...}.
    """
    bounds = {split: parse_range(ranges[split], f"task.treebank_{split}") for split in SPLITS}
    files = {}
    for split in SPLITS:
        trees = [tree for name, data in treebank_files(treebank, *bounds[split])
                 for tree in (clean(t) for t in read_trees(data, name)) if tree is not None]
        files[f"{split}.words"] = _lines(" ".join(t.words()) for t in trees)
        files[f"{split}.tree"] = _lines(" ".join(linearise(t)) for t in trees)
        files[f"{split}.gold"] = _lines(str(t) for t in trees)
    return files


def _lines(texts) -> bytes:
    return "".join(text + "\n" for text in texts).encode("utf-8")


__all__ = ["SPLITS", "parse_range", "treebank_files", "split_files"]
