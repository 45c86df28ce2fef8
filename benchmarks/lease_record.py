"""The GPU lease's record (benchmarks/gpu_lease.sh): one JSON line per lane in one summary file, written
the moment the lane ends, so that a call cut short still returns every lane finished before the cut.

    python3 benchmarks/lease_record.py env SUMMARY                   # the first line: what ran, and where
    python3 benchmarks/lease_record.py lane SUMMARY WORK LANE STATUS SECONDS BUDGET
    python3 benchmarks/lease_record.py skip SUMMARY LANE REASON      # a lane the time left did not allow
    python3 benchmarks/lease_record.py table SUMMARY                 # the lanes, one line each (the call's end)

`lane` reads what the lane's parts left in WORK (the lease's work folder): WORK/LANE.parts (one line per
part: name, exit status, seconds, time limit), each part's output WORK/PART.txt (its last line, when it is
a JSON object, is its result), WORK/PART.json (a result file), WORK/PART.xml (pytest's JUnit report:
the passed / failed / skipped counts). It adds what the lease exists to read: the step's ratio to
PyTorch's in the same call, Multi30k's BLEU, each kernel's rate as a fraction of the copy bandwidth
measured in the call and the kernel versions whose default a timing chose, re-timed; then appends one
line to SUMMARY (one write) and the end of every part's output to SUMMARY's `_tails.txt` neighbour.
Standard library only: it runs on the device before anything else is known to work.
"""
from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"bf16": 0.67, "fp32": 1.0}           # step time over PyTorch's in the same call, at most
COPY_FRACTION_TARGET = 0.8                      # a memory-bound kernel's rate over the measured copy, at least
NCCL_OVERHEAD_TARGET = 0.02                     # fit with an NCCL communicator of one rank over none, at most
TAIL_LINES = 15


def append(summary: Path, record: dict) -> None:
    """One line, one write (O_APPEND): lanes side by side never interleave, and a kill leaves whole lines."""
    line = (json.dumps(record, default=str) + "\n").encode()
    fd = os.open(summary, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _call(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the environment line says what failed, it never stops the lease
        return f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def _cupy_versions() -> dict:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                 # CuPy warns when NCCL does not load: said below instead
        import cupy

        nccl = lambda: __import__("cupy.cuda.nccl", fromlist=["nccl"]).get_version()   # noqa: E731
        return {"cupy": cupy.__version__, "cuda_runtime": _call(cupy.cuda.runtime.runtimeGetVersion),
                "nvrtc": _call(cupy.cuda.nvrtc.getVersion), "nccl": _call(nccl),
                "device": _call(lambda: cupy.cuda.runtime.getDeviceProperties(0)["name"].decode())}


def _torch_versions() -> dict:
    import torch

    return {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "torch_sees_gpu": torch.cuda.is_available()}


def environment() -> dict:
    smi = _call(lambda: subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,"
         "temperature.gpu,power.draw", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=20).stdout.strip() or "no answer")
    commit = ROOT / ".device_data" / "commit.txt"
    return {"lane": "env", "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit.read_text().strip() if commit.is_file() else _call(_git_commit),
            "machine": platform.node(), "nvidia_smi": smi, "python": platform.python_version(),
            **{name: _version(name) for name in ("numpy", "numba", "numba-cuda", "cupy-cuda13x", "cupy-cuda12x",
                                                "nvidia-nccl-cu13", "nvidia-cuda-nvrtc", "sacrebleu")},
            "cupy": _call(_cupy_versions), "torch": _call(_torch_versions),
            "MT_REQUIRE_GPU": os.environ.get("MT_REQUIRE_GPU", "")}


def _git_commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          timeout=10).stdout.strip()


def _json_or_none(line: str):
    try:
        return json.loads(line)
    except ValueError:
        return None


def _last_json_line(text: str):
    for line in reversed(text.strip().splitlines()[-3:]):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            return _json_or_none(line)
    return None


def junit_counts(path: Path) -> dict:
    """passed / failed / errors / skipped of a pytest JUnit report (errors: failures outside the test body)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
    return {"passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
            "failed": counts["failures"], "errors": counts["errors"], "skipped": counts["skipped"]}


PROGRESS = re.compile(r"^([.FEsxX]+)\s*\[\s*\d+%\]\s*$", flags=re.M)   # pytest -q: one letter a test


def progress_counts(text: str) -> dict:
    """The counts of a pytest -q run stopped before its report, from its progress letters."""
    letters = "".join(PROGRESS.findall(text))
    return {"passed": letters.count("."), "failed": letters.count("F"), "errors": letters.count("E"),
            "skipped": letters.count("s"), "cut_short": True}


def first_failures(path: Path, count: int = 8) -> list[str]:
    """'test id: message' of the first failing or erroring tests of a JUnit report (the message's first line)."""
    found = []
    for case in ET.parse(path).getroot().iter("testcase"):
        for problem in (case.find("failure"), case.find("error")):
            if problem is not None and len(found) < count:
                message = (problem.get("message") or problem.text or "").strip().splitlines()
                found.append(f"{case.get('classname')}::{case.get('name')}: {message[0][:300] if message else ''}")
    return found


def read_parts(work: Path, lane: str) -> list[dict]:
    parts = []
    listing = work / f"{lane}.parts"
    for line in (listing.read_text().splitlines() if listing.is_file() else []):
        name, rc, seconds, limit = line.split("\t")
        part = {"part": name, "rc": int(rc), "seconds": int(seconds), "limit_s": int(limit)}
        out = work / f"{name}.txt"
        text = out.read_text(errors="replace") if out.is_file() else ""
        result = _last_json_line(text)
        if (work / f"{name}.json").is_file():
            result = _call(lambda: json.loads((work / f"{name}.json").read_text()))
        if result is not None:
            part["result"] = result
        if (work / f"{name}.xml").is_file():
            part["tests"] = _call(lambda: junit_counts(work / f"{name}.xml"))
            part["first_failures"] = _call(lambda: first_failures(work / f"{name}.xml"))
        elif PROGRESS.search(text):                              # pytest cut short writes no report: its dots
            part["tests"] = progress_counts(text)
        for key, pattern in (("bleu", r"^BLEU\s+([\d.]+)"), ("paper_bleu", r"^paper BLEU\s+([\d.]+)")):
            found = re.findall(pattern, text, flags=re.M)      # `train evaluate`'s report (Scores.format)
            if found:
                part[key] = float(found[-1])
        part["tail"] = text.strip().splitlines()[-TAIL_LINES:]
        err = work / f"{name}.err"
        if int(rc) and err.is_file():
            part["stderr_tail"] = err.read_text(errors="replace").strip().splitlines()[-TAIL_LINES:]
        parts.append(part)
    return parts


def kernel_defaults(rows: list[dict]) -> dict:
    """Per op and dtype: the launcher's DEFAULT version against the fastest CUDA version timed here."""
    found = {}
    for row in rows:
        version = re.fullmatch(r"cuda v(\d+)", row.get("version", ""))
        if version and row.get("ms"):
            found.setdefault((row["op"], row["dtype"]), {})[int(version.group(1))] = row["ms"]
    defaults = {}
    for (op, dtype), times in found.items():
        default = launcher_default(op)
        if default is None or default not in times or len(times) < 2:
            continue
        fastest = min(times, key=times.get)
        defaults[f"{op} {dtype}"] = {"default": default, "default_ms": times[default], "fastest": fastest,
                                     "fastest_ms": times[fastest],
                                     "default_within_3pct": times[default] <= 1.03 * times[fastest]}
    return defaults


def launcher_default(op: str) -> int | None:
    """DEFAULT in the op's kernels/<name>/cupy_launch.py (read as text: no CuPy needed)."""
    name = op.split()[0].replace("_fwd", "_forward").replace("_bwd", "_backward")
    for candidate in (name, f"{name}_forward", f"{name}_step"):
        launch = ROOT / "minitensor" / "kernels" / candidate / "cupy_launch.py"
        if launch.is_file():
            match = re.search(r"^DEFAULT = (\d+)", launch.read_text(), flags=re.M)
            return int(match.group(1)) if match else None
    return None


def derived(parts: list[dict]) -> dict:
    """The numbers the lease owes, from the parts' results, each beside its target."""
    out = {}
    results = {p["part"]: p.get("result") for p in parts}
    for precision in TARGETS:
        step = results.get(f"step_{precision}")
        if isinstance(step, dict) and step.get("step_ms") and step.get("peer_step_ms"):
            ratio = step["step_ms"] / step["peer_step_ms"]
            out[f"step_{precision}"] = {"step_ms": step["step_ms"], "torch_step_ms": step["peer_step_ms"],
                                        "ratio": ratio, "target": TARGETS[precision],
                                        "met": ratio <= TARGETS[precision],
                                        "peak_mem_bytes": step.get("peak_mem_bytes"),
                                        "torch_peak_mem_bytes": step.get("peer_peak_mem_bytes")}
    for p in parts:
        for key in ("bleu", "paper_bleu"):
            if key in p:
                out[f"{p['part']}_{key}"] = p[key]
    kernels, ceilings = results.get("kernels"), results.get("ceilings")
    if isinstance(kernels, dict):
        copy = (ceilings or {}).get("copy_gbps") or kernels.get("dram_copy_gbps")
        rows = kernels.get("rows", [])
        out["copy_gbps"] = copy
        out["kernels_vs_copy"] = {f"{r['op']} | {r['version']} | {r['dtype']}": round(r["rate"] / copy, 3)
                                  for r in rows if copy and r.get("unit") == "GB/s" and r.get("rate")
                                  and r["version"].startswith("cuda")}
        out["kernels_below_target"] = sorted(k for k, v in out["kernels_vs_copy"].items() if v < COPY_FRACTION_TARGET)
        out["kernel_defaults"] = kernel_defaults(rows)
    if isinstance(ceilings, dict):
        out["ceilings"] = {k: ceilings.get(k) for k in ("copy_gbps", "bf16_gemm_tflops", "torch_bf16_gemm_tflops")}
    nccl = results.get("nccl_fit")
    if isinstance(nccl, dict) and isinstance(nccl.get("fit"), dict):
        overhead = nccl["fit"]["overhead"]
        out["nccl_world1_overhead"] = {"overhead": overhead, "target": NCCL_OVERHEAD_TARGET,
                                       "met": overhead <= NCCL_OVERHEAD_TARGET}
    return out


def lane_status(status: str, parts: list[dict]) -> str:
    """skipped (said by the lease), timed out, failed (a part's exit status, or a test run in which no test
    passed, a test failed or one errored), else passed."""
    if status != "ran":
        return status
    if any(p["rc"] in (124, 137) for p in parts):
        return "timed out"
    for p in parts:
        tests = p.get("tests")
        if isinstance(tests, dict) and (tests["failed"] or tests["errors"] or not tests["passed"]):
            return "failed"
    return "failed" if not parts or any(p["rc"] for p in parts) else "passed"


def record_lane(summary: Path, work: Path, lane: str, status: str, seconds: int, budget: int) -> dict:
    parts = read_parts(work, lane)
    record = {"lane": lane, "status": lane_status(status, parts), "seconds": seconds, "budget_s": budget,
              "parts": [{k: v for k, v in p.items() if k not in ("tail", "stderr_tail")} for p in parts]}
    tests = [p["tests"] for p in parts if isinstance(p.get("tests"), dict)]
    if tests:
        record["tests"] = {k: sum(t[k] for t in tests) for k in tests[0]}
    record.update(derived(parts))
    metrics = work / f"{lane}_metrics.jsonl"          # a fit's metrics.jsonl: how far it got, its last losses
    if metrics.is_file():
        records = [r for r in map(_json_or_none, metrics.read_text(errors="replace").splitlines()) if isinstance(r, dict)]
        train, valid = ([r for r in records if r.get("kind") == kind] for kind in ("train", "valid"))
        record["fit"] = {"steps": train[-1]["step"] if train else 0, "last_train": train[-1] if train else None,
                         "last_valid": valid[-1] if valid else None}
    append(summary, record)
    with open(summary.with_name(summary.stem + "_tails.txt"), "a", encoding="utf-8") as tails:
        for p in parts:
            tails.write(f"\n== {lane} / {p['part']}: rc {p['rc']}, {p['seconds']} s of {p['limit_s']} s\n")
            tails.write("\n".join(p["tail"] + [f"stderr: {line}" for line in p.get("stderr_tail", [])]) + "\n")
    return record


def one_line(record: dict) -> str:
    """A lane's record in one line: status, time, and its headline numbers."""
    if record["lane"] == "env":
        cupy = record.get("cupy")
        device = cupy.get("device") if isinstance(cupy, dict) else cupy
        return f"env: {record.get('nvidia_smi')} | CuPy device {device} | {record.get('commit')}"
    bits = [f"{record['lane']}: {record['status']}, {record.get('seconds', 0)} s of {record.get('budget_s', 0)} s"]
    if "reason" in record:
        bits.append(record["reason"])
    if "tests" in record:
        bits.append("{passed} passed, {failed} failed, {errors} errors, {skipped} skipped".format(**record["tests"]))
    for precision in TARGETS:
        step = record.get(f"step_{precision}")
        if step:
            bits.append(f"{precision} {step['step_ms']:.1f} ms = {step['ratio']:.2f}x PyTorch (target <= {step['target']})")
    if "fit" in record:
        bits.append(f"fit {record['fit']['steps']} steps")
    bits += [f"{k} {v:.2f}" for k, v in record.items() if k.endswith("_bleu")]
    if record.get("ceilings"):
        bits.append(", ".join(f"{k} {v:.0f}" for k, v in record["ceilings"].items() if isinstance(v, (int, float))))
    if "kernels_vs_copy" in record:
        bits.append(f"{len(record['kernels_vs_copy'])} kernel rows, {len(record['kernels_below_target'])} under "
                    f"{COPY_FRACTION_TARGET:.0%} of the copy")
    if "nccl_world1_overhead" in record:
        bits.append(f"NCCL one rank {100 * record['nccl_world1_overhead']['overhead']:+.2f}% (target <= 2%)")
    return "; ".join(bits)


def main(argv: list[str]) -> int:
    command, summary = argv[0], Path(argv[1])
    if command == "env":
        record = environment()
        append(summary, record)
    elif command == "lane":
        work, lane, status, seconds, budget = Path(argv[2]), argv[3], argv[4], int(argv[5]), int(argv[6])
        record = record_lane(summary, work, lane, status, seconds, budget)
    elif command == "skip":
        record = {"lane": argv[2], "status": "skipped", "reason": argv[3], "seconds": 0, "budget_s": 0}
        append(summary, record)
    elif command == "table":
        records = [json.loads(line) for line in summary.read_text().splitlines() if line.strip()]
        for record in records:
            print(one_line(record))
        failed = [r["lane"] for r in records if r.get("status") not in (None, "passed")]
        print(f"lease: {len(records) - 1} lanes, " + (f"NOT all passed: {', '.join(failed)}" if failed else "all passed"))
        return 1 if failed else 0
    else:
        print("usage: lease_record.py env|lane|skip|table SUMMARY ...", file=sys.stderr)
        return 2
    print(one_line(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
