"""The GPU lease (benchmarks/gpu_lease.sh), dry-run on the CPU: a lease is 15 rare minutes, so what
can go wrong without a GPU must fail here.

In a copy of the repository beside ../shared, after `prepare`: every file the two device calls
read is there (Multi30k, its prepared data, the wheels the GPU image lacks); every command they
run answers --help and knows each option it is given, and every `--set` is a valid config key;
within each call, each lane's timeouts sum to at most the call's limit less its reserve, and the
limits are the issue's (7 and 4 minutes) under the device tool's timeout_s (10 minutes at most).
Skipped without ../shared/data/multi30k; `prepare` fetches wheels, so without a package index the
test skips as well (visibly).
"""
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from train import config as config_lib

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
ISSUE_LIMITS = {"call1": 420, "call2": 240}   # issue #26: call 1 <= 7 min, call 2 <= 4 min
TOOL_LIMIT_S, CARRY_LIMIT = 600, 64 * 2**20   # the device tool: one command, the tree that travels
OFFLINE = ("NewConnectionError", "Temporary failure in name resolution", "Network is unreachable",
           "Max retries exceeded", "No route to host")
OUTPUT_OPTIONS = {"--out", "--json", "--run-dir"}   # what a part writes, not what it reads

pytestmark = pytest.mark.skipif(not (SHARED / "data" / "multi30k").is_dir(), reason="../shared/data/multi30k absent")


def _bash(repo, *args):
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(repo.parent), "LANG": "C.UTF-8"}
    return subprocess.run(["bash", str(repo / "benchmarks" / "gpu_lease.sh"), *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def lease(tmp_path_factory):
    """(repo copy, prepare's output, the plan's parts): `prepare` run in a copy of what the device tool
    sends (tracked and untracked-not-ignored files), beside ../shared."""
    top = tmp_path_factory.mktemp("lease")
    repo = top / "repo"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    for name in filter(None, listed.split("\0")):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, repo / name)
    (top / "shared").symlink_to(SHARED)
    prepared = _bash(repo, "prepare")
    if prepared.returncode and any(sign in prepared.stderr for sign in OFFLINE):
        pytest.skip(f"no package index reachable: {prepared.stderr.strip().splitlines()[-1]}")
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    plan = _bash(repo, "plan")
    assert plan.returncode == 0, plan.stderr
    return repo, prepared.stdout, parse_plan(plan.stdout)


def parse_plan(text):
    """{call: {"limit", "reserve", "parts": [(lane, name, timeout, argv)]}} from `gpu_lease.sh plan`."""
    calls, call = {}, None
    for line in text.splitlines():
        if line.startswith("# "):
            name, limit, reserve = line[2:].split("\t")
            call = calls[name] = {"limit": int(limit.split()[1]), "reserve": int(reserve.split()[1]), "parts": []}
        else:
            lane, name, timeout, command = line.split("\t")
            call["parts"].append((lane, name, int(timeout), shlex.split(command)))
    return calls


def test_each_lane_of_each_call_fits_the_calls_limit(lease):
    _, prepared, calls = lease
    assert set(calls) == set(ISSUE_LIMITS)
    for call, plan in calls.items():
        assert plan["limit"] <= ISSUE_LIMITS[call]
        lanes = {}
        for lane, name, timeout, _ in plan["parts"]:
            lanes[lane] = lanes.get(lane, 0) + timeout
        for lane, total in lanes.items():
            assert total <= plan["limit"] - plan["reserve"], f"{call} lane {lane}: {total} s of timeouts"
        tool = re.search(rf'gpu_lease.sh {call}".*timeout_s=(\d+)', prepared)
        assert tool, prepared
        assert plan["limit"] < int(tool.group(1)) <= TOOL_LIMIT_S, f"{call}: the tool's timeout_s"


def test_every_file_the_calls_read_is_there_after_prepare(lease):
    repo, prepared, calls = lease
    for call, plan in calls.items():
        for _, name, _, argv in plan["parts"]:
            for before, arg in zip(["", *argv], argv):
                value = arg.split("=", 1)[1] if before == "--set" else arg
                if before in OUTPUT_OPTIONS or value.startswith("runs/") or "/" not in value:
                    continue
                assert (repo / value).exists(), f"{call} {name}: {value} is missing after prepare"
    carry = re.search(r"carry=\[([^]]*)\]", prepared).group(1)
    carried = [repo / path.strip(' "') for path in carry.split(",")]
    assert {path.name for path in carried} == {".device_data", ".whl"}
    for path in carried:
        ignored = subprocess.run(["git", "check-ignore", "-q", f"{path.name}/"], cwd=ROOT)
        assert ignored.returncode == 0, f"{path.name} must be ignored by git: the device tool carries it apart"
    wheels = sorted(p.name for p in (repo / ".whl").glob("*.whl"))
    assert any(w.startswith("sacremoses-") and ("py3-none-any" in w or "cp312" in w) for w in wheels), wheels
    size = sum(f.stat().st_size for f in repo.rglob("*") if f.is_file())
    assert size < CARRY_LIMIT, f"the tree and what it carries: {size / 2**20:.1f} MiB"


def test_multi30k_is_prepared_where_fit_will_look(lease):
    """Both trainings read the same prepared data, and `prepare` with their settings finds it made."""
    repo, _, calls = lease
    fits = [argv for _, name, _, argv in calls["call1"]["parts"] if argv[2:4] == ["train", "fit"]]
    data = {(argv[argv.index("--config") + 1], argv[argv.index("--data-dir") + 1],
             tuple(argv[i + 1] for i, arg in enumerate(argv) if arg == "--set" and argv[i + 1].startswith("task.")))
            for argv in fits}
    assert len(fits) == 2 and len(data) == 1, data
    (config, data_dir, task), = data
    again = subprocess.run([sys.executable, "-m", "train", "prepare", "--config", config, "--data-dir", data_dir,
                            *(a for o in task for a in ("--set", o))],
                           cwd=repo, env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("reusing prepared data"), again.stdout


def _help_command(argv):
    """The --help call for a part's command: python3 -m train SUB / -m pytest / a script."""
    python, rest = sys.executable, argv[1:]
    if rest[:2] == ["-m", "train"]:
        return [python, "-m", "train", rest[2], "--help"]
    if rest[:2] == ["-m", "pytest"]:
        return [python, "-m", "pytest", "--help"]
    return [python, rest[0], "--help"]


def test_every_command_answers_help_and_knows_its_options(lease):
    repo, _, calls = lease
    commands = {}
    for plan in calls.values():
        for _, name, _, argv in plan["parts"]:
            assert argv[0] == "python3", f"{name}: the GPU machine's Python is python3"
            commands.setdefault(tuple(_help_command(argv)), []).append((name, argv))
    if any("benchmarks/" in help_argv[1] for help_argv in commands):
        pytest.importorskip("cupy")   # the GPU benchmarks import CuPy (which imports without a GPU)

    def show(help_argv):
        return subprocess.run(list(help_argv), cwd=repo, env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, timeout=120)

    with ThreadPoolExecutor(max_workers=4) as pool:
        shown = dict(zip(commands, pool.map(show, commands)))
    for help_argv, uses in commands.items():
        answer = shown[help_argv]
        assert answer.returncode == 0, f"{' '.join(help_argv[1:])}: {answer.stderr[-2000:]}"
        for name, argv in uses:
            for option in (a.split("=")[0] for a in argv if a.startswith("--")):
                assert option in answer.stdout, f"{name}: {option} is not an option of {' '.join(help_argv[1:-1])}"
            if "--config" in argv:   # every --set names a real config key with a valid value
                overrides = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--set"]
                config_lib.load(repo / argv[argv.index("--config") + 1], overrides)
