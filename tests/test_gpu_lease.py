"""The GPU lease (benchmarks/gpu_lease.sh), dry-run on the CPU: a lease is 15 rare device-minutes, so what
can go wrong without a GPU must fail here.

The plan: one call whose own limit, plus its lanes' kill-after, ends under the device tool's timeout_s
(at most 540 s), leaving 4 device-minutes of 15 for a rerun after a 2-minute machine start; each lane's
parts fit its cap, and the lanes' caps, group by group, fit the call. The call itself, with stand-in
lanes (fast): killed at a random moment, every lane it said was finished has its JSON line in $OUT and
no line is torn; the GPU test lane, run for real on a small GPU test file under MT_REQUIRE_GPU=1 without
a GPU, fails, with its counts. In a copy of the repository beside ../shared, after `prepare`: every
file the call reads is there (Multi30k, its prepared data, the wheels the GPU image lacks), and every
command it runs answers --help and knows each option it is given, and every `--set` is a valid config
key. Those last skip without ../shared/data/multi30k or a package index (`prepare` fetches wheels).
"""
import json
import os
import random
import re
import shlex
import signal
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from train import config as config_lib

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
CALL_LIMIT_S, LEASE_S, START_S, RERUN_S = 540, 900, 120, 240   # the one call; the lease, a start, a rerun
KILL_AFTER_S = 10                              # a part's SIGKILL after its SIGTERM (gpu_lease.sh part)
CARRY_LIMIT = 64 * 2**20                       # the device tool: the tree that travels
OFFLINE = ("NewConnectionError", "Temporary failure in name resolution", "Network is unreachable",
           "Max retries exceeded", "No route to host")
OUTPUT_OPTIONS = {"--out", "--json", "--run-dir", "--junit-xml"}   # what a part writes, not what it reads

needs_shared = pytest.mark.skipif(not (SHARED / "data" / "multi30k").is_dir(),
                                  reason="../shared/data/multi30k absent")


def _env(repo, **extra):
    return {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(repo.parent), "LANG": "C.UTF-8",
            **extra}


def _bash(repo, *args):
    return subprocess.run(["bash", str(repo / "benchmarks" / "gpu_lease.sh"), *args], cwd=repo, env=_env(repo),
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def plan():
    done = _bash(ROOT, "plan")
    assert done.returncode == 0, done.stderr
    return parse_plan(done.stdout)


@pytest.fixture(scope="module")
def lease(tmp_path_factory, plan):
    """(repo copy, prepare's output, the plan): `prepare` run in a copy of what the device tool sends
    (tracked and untracked-not-ignored files), beside ../shared."""
    if not (SHARED / "data" / "multi30k").is_dir():
        pytest.skip("../shared/data/multi30k absent")
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
    return repo, prepared.stdout, plan


def parse_plan(text):
    """{"limit", "reserve", "timeout_s", "groups": [[lane, ...], ...] (the call's, in order), "lanes": {lane:
    {"min", "cap", "parts": [(name, cap, argv)]}}} from `gpu_lease.sh plan` (the ablate lane is a call of its own)."""
    header, *rows = text.splitlines()
    fields = dict(field.split(" ", 1) for field in header[2:].split("\t"))
    plan = {"limit": int(fields["limit"]), "reserve": int(fields["reserve"]), "timeout_s": int(fields["timeout_s"]),
            "groups": [group.split("+") for group in fields["groups"].split()], "lanes": {}}
    for row in rows:
        kind, lane, *rest = row.split("\t")
        if kind == "lane":
            plan["lanes"][lane] = {"min": int(rest[0]), "cap": int(rest[1]), "parts": []}
        else:
            plan["lanes"][lane]["parts"].append((rest[0], int(rest[1]), shlex.split(rest[2])))
    return plan


def all_parts(plan):
    return [(lane, *part) for lane, spec in plan["lanes"].items() for part in spec["parts"]]


def test_the_lease_is_one_call_that_leaves_time_for_a_rerun(plan):
    assert plan["limit"] + KILL_AFTER_S < plan["timeout_s"] <= CALL_LIMIT_S
    assert LEASE_S - START_S - plan["timeout_s"] >= RERUN_S
    assert [lane for group in plan["groups"] for lane in group][:2] == ["gpu_tests", "multi30k"]   # by value
    for lane, spec in plan["lanes"].items():
        assert spec["min"] <= spec["cap"], lane
        assert sum(cap for _, cap, _ in spec["parts"]) <= spec["cap"], f"{lane}: its parts' caps"
    used = sum(max(plan["lanes"][lane]["cap"] for lane in group) for group in plan["groups"])
    assert used <= plan["limit"] - plan["reserve"], f"the lanes' caps add up to {used} s"


def test_every_file_the_call_reads_is_there_after_prepare(lease):
    repo, prepared, plan = lease
    assert f'run(command="bash benchmarks/gpu_lease.sh run", carry=[".device_data", ".whl"], ' \
           f'timeout_s={plan["timeout_s"]})' in prepared
    for lane, name, _, argv in all_parts(plan):
        for before, arg in zip(["", *argv], argv):
            value = arg.split("=", 1)[1] if before == "--set" else arg
            if before in OUTPUT_OPTIONS or value.startswith(("runs/", "-")) or "/" not in value:
                continue
            assert (repo / value).exists(), f"{lane} {name}: {value} is missing after prepare"
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
    """The training reads the prepared data, and `prepare` with its settings finds it made."""
    repo, _, plan = lease
    fits = [argv for _, name, _, argv in all_parts(plan) if argv[2:4] == ["train", "fit"]]
    data = {(argv[argv.index("--config") + 1], argv[argv.index("--data-dir") + 1],
             tuple(argv[i + 1] for i, arg in enumerate(argv) if arg == "--set" and argv[i + 1].startswith("task.")))
            for argv in fits}
    assert len(fits) == 1 and len(data) == 1, data
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
    repo, _, plan = lease
    commands = {}
    for _, name, _, argv in all_parts(plan):
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


# ---- the call itself, dry-run: stand-in lanes, and the real GPU test lane on a small file ----------------
STAND_IN_LANES = """
LANES=(quick_1+quick_2 quick_3 quick_4 quick_5 slow)
for lane in quick_1 quick_2 quick_3 quick_4 quick_5 slow; do MIN[$lane]=1 CAP[$lane]=30; done
quick() { part "$lane" 30 python3 -c 'import json; print(json.dumps({"done": 1}))'; }
lane_quick_1() { quick; }; lane_quick_2() { quick; }; lane_quick_3() { quick; }; lane_quick_4() { quick; }
lane_quick_5() { quick; }
lane_slow() { part slow 30 sleep 30; }
"""
GPU_LANE_ONLY = """
LANES=(gpu_tests)
MIN[gpu_tests]=1
"""
A_GPU_TEST_FILE = """
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(True, reason="no usable CuPy GPU (stand-in)")]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_on_the_gpu(n):
    assert n
"""


@pytest.fixture
def call_repo(tmp_path):
    """The lease's two files and the tests' conftest in a repository of their own (minitensor linked), so a
    dry run writes nothing into this one; a GPU test file that always skips for want of a GPU."""
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "tests").mkdir()
    for name in ("benchmarks/gpu_lease.sh", "benchmarks/lease_record.py", "tests/conftest.py", "pyproject.toml"):
        shutil.copy2(ROOT / name, repo / name)
    (repo / "minitensor").symlink_to(ROOT / "minitensor")
    (repo / "tests" / "test_stand_in_gpu.py").write_text(A_GPU_TEST_FILE)
    (tmp_path / "stand_in_lanes.sh").write_text(STAND_IN_LANES)
    (tmp_path / "gpu_lane_only.sh").write_text(GPU_LANE_ONLY)
    return repo


def _summary(out):
    lines = (out / "lease.jsonl").read_text().splitlines() if (out / "lease.jsonl").is_file() else []
    return {record["lane"]: record for record in map(json.loads, lines)}   # a torn line fails json.loads


def test_a_call_killed_at_a_random_moment_keeps_every_finished_lane(call_repo, tmp_path):
    """SIGKILL to the whole call (as the device tool's limit does) at a random moment: every lane the call
    said had ended has its whole JSON line in $OUT, and the lines before the cut are all there."""
    moment = random.uniform(1.0, 6.0)
    out = tmp_path / "out"
    call = subprocess.Popen(["bash", "benchmarks/gpu_lease.sh", "run"], cwd=call_repo, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env=_env(call_repo, OUT=str(out), LEASE_LIMIT_S="60",
                                     LEASE_LANES_FROM=str(tmp_path / "stand_in_lanes.sh")))
    time.sleep(moment)
    os.killpg(call.pid, signal.SIGKILL)
    said = call.communicate(timeout=60)[0]
    ended = set(re.findall(r"^(\w+): (?:passed|failed|timed out|skipped)", said, flags=re.M))
    recorded = _summary(out)
    assert ended <= set(recorded), f"killed at {moment:.1f} s: {ended - set(recorded)} said ended, not in $OUT\n{said}"
    assert "slow" not in recorded and all(recorded[lane]["status"] == "passed" for lane in ended), said
    if ended:
        assert "env" in recorded                                 # the environment line comes first


def test_the_gpu_lane_fails_when_every_gpu_test_would_skip(call_repo, tmp_path):
    """MT_REQUIRE_GPU=1 and no GPU: each GPU test that would skip fails; the lane, its counts and the call say so."""
    out = tmp_path / "out"
    done = subprocess.run(["bash", "benchmarks/gpu_lease.sh", "run"], cwd=call_repo, capture_output=True, text=True,
                          timeout=240, env=_env(call_repo, OUT=str(out), MT_REQUIRE_GPU="1", LEASE_LIMIT_S="200", LEASE_TEST_WORKERS="0",
                                                LEASE_TEST_PATHS="tests/test_stand_in_gpu.py",
                                                LEASE_LANES_FROM=str(tmp_path / "gpu_lane_only.sh")))
    lane = _summary(out)["gpu_tests"]
    assert lane["status"] == "failed" and lane["tests"]["passed"] == 0, lane
    assert lane["tests"]["failed"] + lane["tests"]["errors"] == 3, lane
    assert done.returncode == 1 and "NOT all passed: gpu_tests" in done.stdout, done.stdout + done.stderr
    assert all("would skip: no usable CuPy GPU (stand-in)" in line for line in lane["parts"][0]["first_failures"])


@pytest.fixture
def lease_record():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import lease_record
    finally:
        sys.path.pop(0)
    return lease_record


def test_a_test_run_in_which_nothing_passed_is_a_failed_lane(lease_record):
    """Without MT_REQUIRE_GPU every GPU test skips, pytest exits 0: the lane still fails (nothing ran)."""
    skipped = [{"part": "gpu_tests", "rc": 0, "tests": {"passed": 0, "failed": 0, "errors": 0, "skipped": 3124}}]
    ran = [{"part": "gpu_tests", "rc": 0, "tests": {"passed": 3124, "failed": 0, "errors": 0, "skipped": 0}}]
    assert lease_record.lane_status("ran", skipped) == "failed"
    assert lease_record.lane_status("ran", ran) == "passed"


def test_a_test_run_cut_short_still_has_its_counts(lease_record, tmp_path):
    """pytest stopped at the lane's limit writes no JUnit report: the counts come from its -q progress letters."""
    (tmp_path / "gpu_tests.txt").write_text("....F.s. [ 40%]\n..E..... [ 80%]\n")
    (tmp_path / "gpu_tests.parts").write_text("gpu_tests\t124\t240\t240\n")
    record = lease_record.record_lane(tmp_path / "lease.jsonl", tmp_path, "gpu_tests", "ran", 240, 240)
    assert record["status"] == "timed out"
    assert record["tests"] == {"passed": 13, "failed": 1, "errors": 1, "skipped": 1, "cut_short": 1}
    assert json.loads((tmp_path / "lease.jsonl").read_text())["tests"]["passed"] == 13


def test_the_record_reads_the_ratios_the_fractions_and_the_defaults(lease_record):
    """What the device's parts leave (bench --json lines, the kernels' and ceilings' files), read into the numbers
    owed: time ratios to PyTorch's step, kernel rates over the copy measured in the call, DEFAULT versions re-timed."""
    rows = [{"op": "adam", "version": "cuda v1", "dtype": "float32", "unit": "GB/s", "ms": 0.70, "rate": 2900.0},
            {"op": "adam", "version": "cuda v2", "dtype": "float32", "unit": "GB/s", "ms": 0.60, "rate": 3400.0},
            {"op": "adam", "version": "torch Adam(fused=True)", "dtype": "float32", "unit": "GB/s", "ms": 0.8,
             "rate": 2500.0}]
    parts = [{"part": "step_bf16", "rc": 0, "result": {"step_ms": 60.0, "peer_step_ms": 100.0, "peak_mem_bytes": 5}},
             {"part": "step_fp32", "rc": 0, "result": {"step_ms": 120.0, "peer_step_ms": 100.0}},
             {"part": "ceilings", "rc": 0, "result": {"copy_gbps": 4000.0, "bf16_gemm_tflops": 780.0}},
             {"part": "kernels", "rc": 0, "result": {"dram_copy_gbps": 3900.0, "rows": rows}},
             {"part": "nccl_fit", "rc": 0, "result": {"fit": {"overhead": 0.03}}},
             {"part": "m30k_test2016", "rc": 0, "bleu": 36.5}]
    owed = lease_record.derived(parts)
    assert owed["step_bf16"]["ratio"] == pytest.approx(0.6) and owed["step_bf16"]["met"]
    assert owed["step_fp32"]["ratio"] == pytest.approx(1.2) and not owed["step_fp32"]["met"]
    assert owed["kernels_vs_copy"] == {"adam | cuda v1 | float32": 0.725, "adam | cuda v2 | float32": 0.85}
    assert owed["kernels_below_target"] == ["adam | cuda v1 | float32"]
    assert owed["kernel_defaults"]["adam float32"] == {"default": 1, "default_ms": 0.70, "fastest": 2,
                                                      "fastest_ms": 0.60, "default_within_3pct": False}
    assert not owed["nccl_world1_overhead"]["met"] and owed["m30k_test2016_bleu"] == 36.5
    assert "0.60x PyTorch" in lease_record.one_line({"lane": "step_ratio", "status": "passed", **owed})
