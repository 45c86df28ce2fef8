"""Running `python -m train` as a user does, for the tests: a subprocess with this checkout first on the path."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# One Numba thread unless a test sets more (tests/conftest.py says why; BLAS is set there for every process).
ENV = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), NUMBA_NUM_THREADS="1")


def run_cli(*args: str, stdin: bytes = b"", cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m train ARGS` with `stdin`; the timeout is a generous hang guard, not a speed check."""
    return subprocess.run([sys.executable, "-m", "train", *args], input=stdin, capture_output=True,
                          cwd=cwd, env=ENV, timeout=timeout)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str, status: int = 2) -> str:
    """The command failed with `status` and said why in one `error: ...` line holding every fragment."""
    stderr = result.stderr.decode()
    assert result.returncode == status, stderr
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert "Traceback" not in stderr
    return lines[0]
