"""train/threads.py: a fixed thread count for BLAS and Numba, never more than the usable cores."""
import os

import pytest

from train import threads


def test_more_threads_than_cores_are_lowered_with_a_warning(monkeypatch):
    monkeypatch.setattr(threads, "usable_cores", lambda: 1)
    with pytest.warns(UserWarning, match="3 CPU threads requested but this process may use 1 cores; using 1"):
        with threads.cpu_threads(3) as done:
            assert done[0] in ("numba 1", "openblas 1"), done
            assert all(item.endswith(" 1") for item in done if not item.startswith("the machine is busy"))


def test_decoding_threads_default_is_fixed_and_at_most_the_cores(monkeypatch):
    monkeypatch.setattr(threads, "usable_cores", lambda: 16)
    assert threads.decoding_threads(None) == threads.DECODE_THREADS == 4
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    assert threads.decoding_threads(None) == 2
    assert threads.decoding_threads(3) == 3, "an explicit request is the user's (cpu_threads lowers it if need be)"


def test_a_busy_machine_is_said_beside_the_threads(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 0.0, 0.0))
    with threads.cpu_threads(1) as done:
        assert done[-1].startswith(f"the machine is busy (load 64.0 on {os.cpu_count()} cores")
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    with threads.cpu_threads(1) as done:
        assert not any("busy" in item for item in done)
