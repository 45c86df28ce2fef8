"""Start-up agreement: before the first update every rank shows the others what it is about to train (§5.2).

Data parallelism is only right if every rank starts from the same state: the same config, the
same update plan, the same restored step and data position, dropout generator, loss scale and
checkpoint. Only the weights and Adam's moments are broadcast from rank 0; everything else each
rank restores by itself, from the run directory it sees. A rank given another config, or a node
whose copy of the run directory is older, would train on silently wrong.

    check_agreement(comm, {"config": ..., "checkpoint": ..., ...})

gathers every rank's values (small: a config, an RNG state, a file digest) and raises the same
InputError on every rank when any differ, naming the field, the ranks and both values. One
collective (all_gather_json), every rank, before the first update.
"""
from __future__ import annotations

import json

from train.config import diff
from train.errors import InputError

SHOWN_CHARS = 80


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _shown(value) -> str:
    text = _canonical(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def _difference(name: str, mine, theirs) -> str:
    """What differs between two ranks' values of a field, in words."""
    if isinstance(mine, dict) and isinstance(theirs, dict) and name == "config":
        keys = diff(mine, theirs)
        return ", ".join(f"{k} = {_shown(_lookup(mine, k))} vs {_shown(_lookup(theirs, k))}" for k in keys[:3])
    return f"{_shown(mine)} vs {_shown(theirs)}"


def _lookup(data: dict, dotted: str):
    for part in dotted.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


def disagreements(gathered: list[dict]) -> list[str]:
    """One line per field in which some rank differs from rank 0: the field, the ranks and the values."""
    reference, lines = gathered[0], []
    for name in reference:
        others = [rank for rank, values in enumerate(gathered) if _canonical(values.get(name)) != _canonical(reference[name])]
        if others:
            first = gathered[others[0]].get(name)
            lines.append(f"{name} of rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} differs "
                         f"from rank 0's ({_difference(name, reference[name], first)}, rank 0 vs rank {others[0]})")
    return lines


def check_agreement(comm, fields: dict) -> None:
    """InputError on every rank unless every rank of `comm` holds the same `fields` (JSON-able values)."""
    if comm.world_size == 1:
        return
    lines = disagreements(comm.all_gather_json(fields))
    if lines:
        raise InputError("the ranks disagree before the first update: " + "; ".join(lines) + "; every rank must run "
                         "the same command on the same run directory (one file system that every node sees)")
