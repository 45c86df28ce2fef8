#!/usr/bin/env bash
# The GPU lease: every GPU measurement the project owes, in ONE device call. A lease is rare and short
# (one H200, 15 device-minutes in all, the machine's start of 1-2 minutes included; one command at most
# 10 minutes; no package registry; only the working tree and the carried folders travel, not ../shared).
# The call ends within 540 s, which leaves at least 4 device-minutes for a focused rerun.
#
#   bash benchmarks/gpu_lease.sh prepare     # here, on the CPU, first: Multi30k and its prepared data into
#                                            # .device_data/, the wheels the GPU image lacks into .whl/ (both
#                                            # ignored by git); prints the device call:
#       run(command="bash benchmarks/gpu_lease.sh run", carry=[".device_data", ".whl"], timeout_s=540)
#   bash benchmarks/gpu_lease.sh run LANE... # a focused rerun of some lanes (same carry, a smaller timeout_s)
#   bash benchmarks/gpu_lease.sh plan        # each lane's group, budget and parts (tests/test_gpu_lease.py)
#   bash benchmarks/gpu_lease.sh ablate table3|recipe   # Table 3 on Multi30k: leases of their own; each
#       call resumes the grid from the <grid>_state.tar it left in $OUT, carried back in .device_data/.
#
# The call writes an environment line first (Python, NumPy, Numba, numba-cuda, CuPy, NVRTC, NCCL, torch,
# nvidia-smi's name, driver and clocks), then runs the lanes in order of value, each with a time budget
# taken from what is left of the call (LEASE_LEFT_S) and capped, skipped with a line saying so when less
# than its minimum is left:
#   gpu_tests   every test marked gpu, with MT_REQUIRE_GPU=1 (set when nvidia-smi answers): a GPU test that
#               would skip fails instead; the lane fails unless tests passed and none failed. } side by
#   multi30k    one bf16 fit, stopped by SIGTERM at its budget (it checkpoints), its last     } side: no
#               5 checkpoints averaged (§6.1), BLEU on test_2016_flickr                      } timings
#   step_ratio  the base step in bf16 and in fp32 against PyTorch's in the same call, peak memory
#   kernels     the ceilings measured here (copy bandwidth, bf16 GEMM), then each kernel as a fraction of the
#               copy; kernel versions whose DEFAULT a timing chose (on an H100) re-timed
#   nccl        fit through an NCCL communicator of one rank against none (target <= 2% slower)
#   cuda_graph  the base forward + backward captured and replayed against eager; dropout refuses a capture
# Each lane appends one JSON line to $OUT/lease.jsonl the moment it ends (benchmarks/lease_record.py),
# and the end of its parts' output to $OUT/lease_tails.txt; a running lane's output is in
# $OUT/now_<lane>.txt until then. So a call cut short returns every lane finished before the cut. At the
# end: every log in $OUT/lease_logs.tar.gz and one line per lane (the reply's output_tail); the exit
# status is 0 only if every lane passed. OUT defaults to runs/lease. gpu_tests: LEASE_TEST_PATHS (default
# tests) and LEASE_TEST_WORKERS (pytest-xdist processes, default min(cores, 8); 0: none).
set -uo pipefail
cd "$(dirname "$0")/.."

LIMIT_S=${LEASE_LIMIT_S:-500}   # the call's own end, counted from its start
TOOL_TIMEOUT_S=540              # the device tool's timeout_s: above LIMIT_S (the last part's kill-after, packing)
RESERVE_S=10                    # what the lanes leave of LIMIT_S: the table and the logs' tar
CARRY=(.device_data .whl)
WHEELS=(sacremoses)             # what the GPU image lacks (KINDS.md): paper BLEU's tokenizer
DATA=.device_data
M30K=$DATA/multi30k
M30K_FILES=(--set task.kind=files --set "task.train_src=$M30K/train.en.gz" --set "task.train_tgt=$M30K/train.de.gz"
            --set "task.valid_src=$M30K/val.en.gz" --set "task.valid_tgt=$M30K/val.de.gz"
            --set "task.test_src=$M30K/test_2016_flickr.en.gz" --set "task.test_tgt=$M30K/test_2016_flickr.de.gz")
# In order of value; lanes joined by + run side by side (neither times anything). Seconds: the least a
# lane is started with, and the most it gets.
LANES=(gpu_tests+multi30k step_ratio kernels nccl cuda_graph)
declare -A MIN=([gpu_tests]=60 [multi30k]=150 [step_ratio]=40 [kernels]=30 [nccl]=30 [cuda_graph]=20 [ablate]=60)
declare -A CAP=([gpu_tests]=240 [multi30k]=240 [step_ratio]=90 [kernels]=70 [nccl]=50 [cuda_graph]=30 [ablate]=480)
OUT_DIR=${OUT:-runs/lease}
WORK=runs/lease/work
SUMMARY=$OUT_DIR/lease.jsonl
RECORD=(python3 benchmarks/lease_record.py)
mode=run lane= lane_end=0 grid=

part() {  # part [--cut-ok] NAME CAP COMMAND...: COMMAND under min(CAP, what is left of the lane's budget)
  local cut_ok=0 name cap limit start rc
  [ "$1" = --cut-ok ] && { cut_ok=1; shift; }   # stopped at its limit is its plan (fit: SIGTERM checkpoints)
  name=$1 cap=$2
  shift 2
  if [ "$mode" = plan ]; then
    printf 'part\t%s\t%s\t%s\t%s\n' "$lane" "$name" "$cap" "$*"
    return 0
  fi
  limit=$(( lane_end - SECONDS ))
  [ "$cap" -lt "$limit" ] && limit=$cap
  if [ "$limit" -lt 5 ]; then
    echo "not run: ${limit} s left of the lane's budget" > "$WORK/$name.txt"
    printf '%s\t125\t0\t%s\n' "$name" "$limit" >> "$WORK/$lane.parts"
    return 125
  fi
  start=$SECONDS
  echo "[${SECONDS} s] $lane / $name: at most $limit s"
  timeout --signal=TERM --kill-after=10 "$limit" "$@" < /dev/null 2> "$WORK/$name.err" \
    | tee -a "$OUT_DIR/now_$lane.txt" > "$WORK/$name.txt"
  rc=${PIPESTATUS[0]}
  if [ "$cut_ok" = 1 ] && [ "$rc" = 124 ]; then
    echo "stopped at its time limit (${limit} s), as planned" >> "$WORK/$name.txt"
    rc=0
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" $((SECONDS - start)) "$limit" >> "$WORK/$lane.parts"
  return "$rc"
}

have() { python3 -c "import $1" 2>/dev/null; }

# ---- the lanes ------------------------------------------------------------------------------------
lane_gpu_tests() {
  local parallel=() guard=() workers=${LEASE_TEST_WORKERS:-$(( $(nproc) < 8 ? $(nproc) : 8 ))}
  [ "$workers" -gt 0 ] && have xdist && parallel=(-n "$workers" --dist loadfile)   # 8 files at once on 16 cores
  have pytest_timeout && guard=(--timeout 120)         # a hang guard per test (NCCL waits forever otherwise)
  # shellcheck disable=SC2086  # LEASE_TEST_PATHS: several paths
  part gpu_tests "${CAP[gpu_tests]}" python3 -m pytest -p no:cacheprovider -m gpu -q -rfEs --maxfail=200 \
    --continue-on-collection-errors --junit-xml="$WORK/gpu_tests.xml" "${parallel[@]}" "${guard[@]}" \
    ${LEASE_TEST_PATHS:-tests}
}

lane_multi30k() {  # fit in bf16 until the lane's last 75 s, average the last 5 checkpoints (§6.1), test2016 BLEU
  local run=runs/lease_m30k last=5
  part --cut-ok m30k_fit $(( lane_end - SECONDS - 75 )) python3 -m train fit --config configs/multi30k.toml \
    --backend cuda --run-dir "$run" --data-dir "$DATA/prepared" --force --no-progress "${M30K_FILES[@]}" \
    --set train.precision=bf16
  if [ "$mode" != plan ]; then   # a fit cut before its 5th checkpoint: the ones it wrote (the record says how many)
    last=$(find "$run" -maxdepth 1 -name 'ckpt_*.safetensors' ! -name '*.optimizer.*' 2>/dev/null | wc -l)
    [ "$last" -gt 5 ] && last=5
    [ "$last" -lt 1 ] && last=1
  fi
  part m30k_average 15 python3 -m train average "$run" --last "$last" --out "$run/averaged.safetensors" --force
  part m30k_test2016 60 python3 -m train evaluate --ckpt "$run/averaged.safetensors" --backend cuda \
    --src "$M30K/test_2016_flickr.en.gz" --ref "$M30K/test_2016_flickr.de.gz" --out "$WORK/m30k_test2016.de"
  [ "$mode" = plan ] || cp "$run/metrics.jsonl" "$WORK/multi30k_metrics.jsonl" 2>/dev/null
  return 0
}

lane_step_ratio() {  # ours and PyTorch's, one after the other in the same call, nothing else on the GPU
  part step_bf16 50 python3 -m train bench --backend cuda --precision bf16 --steps 10 --warmup 3 --json
  part step_fp32 40 python3 -m train bench --backend cuda --precision fp32 --steps 5 --warmup 2 --json
}

lane_kernels() {  # the ceilings first: every kernel row is read as a fraction of them
  part ceilings 25 python3 benchmarks/bench_ceilings.py --json "$WORK/ceilings.json"
  part kernels 45 python3 benchmarks/bench_gpu_kernels.py --only softmax,layernorm,sublayer,bias,adam,embedding \
    --json "$WORK/kernels.json"
}

lane_nccl() { part nccl_fit 50 python3 benchmarks/bench_data_parallel.py --steps 40 --json "$WORK/nccl_fit.json"; }

lane_cuda_graph() { part graph 30 python3 benchmarks/bench_cuda_graph.py --json "$WORK/graph.json"; }

lane_ablate() {  # Table 3's grids: SIGTERM before the limit: fit finishes its update, checkpoints, the grid stops
  local args dir=runs/$grid-multi30k-gpu
  case "$grid" in
    table3) args=(--grid table3 --rows A,D --steps 2000) ;;
    recipe) args=(--grid recipe --steps 3000) ;;
  esac
  if [ "$mode" != plan ] && [ ! -d "$dir" ] && [ -f "$DATA/${grid}_state.tar" ]; then   # the finished variants
    mkdir -p "$dir" && tar -xf "$DATA/${grid}_state.tar" -C "$dir"
  fi
  part --cut-ok "ablate_$grid" "${CAP[ablate]}" python3 -m train ablate "${args[@]}" --config configs/multi30k.toml \
    --backend cuda --out "$dir" --no-progress "${M30K_FILES[@]}"
  [ "$mode" = plan ] && return 0
  for file in grid.txt "$grid.md" "$grid.csv" "$grid.png"; do cp "$dir/$file" "$WORK/" 2>/dev/null; done
  tar -cf "$OUT_DIR/${grid}_state.tar" -C "$dir" grid.txt results 2>/dev/null
  if [ -f "$dir/$grid.csv" ] && ! grep -q ',pending,' "$dir/$grid.csv"; then echo "grid complete"
  else echo "grid not complete: run the same call again"; fi >> "$WORK/ablate_$grid.txt"
}

# A focused rerun of your own: LEASE_LANES_FROM=FILE is sourced here, after the lanes above, and may
# redefine LANES, MIN, CAP and lane_* functions.
# shellcheck disable=SC1090
[ -n "${LEASE_LANES_FROM:-}" ] && source "$LEASE_LANES_FROM"

# ---- the call -------------------------------------------------------------------------------------
run_lane() {  # run_lane LANE: its budget from what is left, its parts, then its JSON line (in that order)
  local start budget
  lane=$1
  export LEASE_LEFT_S=$(( LIMIT_S - SECONDS ))
  budget=$(( LEASE_LEFT_S - RESERVE_S ))
  [ "${CAP[$lane]}" -lt "$budget" ] && budget=${CAP[$lane]}
  if [ "$mode" = plan ]; then
    printf 'lane\t%s\t%s\t%s\n' "$lane" "${MIN[$lane]}" "${CAP[$lane]}"
    lane_end=$(( SECONDS + CAP[$lane] ))
    "lane_$lane"
    return 0
  fi
  if [ "$budget" -lt "${MIN[$lane]}" ]; then
    "${RECORD[@]}" skip "$SUMMARY" "$lane" "${LEASE_LEFT_S} s left of the call: the lane needs ${MIN[$lane]} s"
    return 0
  fi
  lane_end=$(( SECONDS + budget )) start=$SECONDS
  : > "$WORK/$lane.parts"
  echo "[${SECONDS} s] lane $lane: $budget s of ${LEASE_LEFT_S} s left"
  "lane_$lane"
  "${RECORD[@]}" lane "$SUMMARY" "$WORK" "$lane" ran $((SECONDS - start)) "$budget" \
    || printf '{"lane": "%s", "status": "unrecorded"}\n' "$lane" >> "$SUMMARY"
  rm -f "$OUT_DIR/now_$lane.txt"
}

setup() {  # the folders, the wheels, MT_REQUIRE_GPU, the environment line
  rm -rf "$WORK" && mkdir -p "$WORK" "$OUT_DIR"
  rm -f "$SUMMARY" "$OUT_DIR/lease_tails.txt" "$OUT_DIR"/now_*.txt "$OUT_DIR/lease_logs.tar.gz"
  export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore PYTHONPATH=.
  if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      && export PYTHONPATH=.:/tmp/site
  fi
  nvidia-smi -L > /dev/null 2>&1 && export MT_REQUIRE_GPU=1
  "${RECORD[@]}" env "$SUMMARY" || printf '{"lane": "env", "status": "unrecorded"}\n' >> "$SUMMARY"
}

finish() {  # every log packed, one line per lane; the exit status: 0 only if every lane passed
  tar -czf "$OUT_DIR/lease_logs.tar.gz" -C "$WORK" . 2>/dev/null
  "${RECORD[@]}" table "$SUMMARY"
}

call() {  # call [LANE...]: the groups of LANES in order, each group's lanes side by side; only LANE... if named
  local group members wanted=" $* " picked
  for group in "${LANES[@]}"; do
    IFS=+ read -ra members <<< "$group"
    picked=()
    for lane in "${members[@]}"; do
      if [ $# = 0 ] || [[ $wanted == *" $lane "* ]]; then picked+=("$lane"); fi
    done
    if [ "$mode" = plan ] || [ "${#picked[@]}" = 1 ]; then
      for lane in "${picked[@]}"; do run_lane "$lane"; done
    else
      for lane in "${picked[@]}"; do run_lane "$lane" & done
      wait
    fi
  done
}

# ---- prepare, on the CPU -----------------------------------------------------------------------
prepare() {
  local shared=../shared/data/multi30k version
  [ -d "$shared" ] || { echo "error: $shared not found: prepare needs the project's shared data" >&2; exit 2; }
  mkdir -p "$M30K" .whl
  cp -u "$shared"/*.gz "$M30K"/
  echo "commit $(git rev-parse --short HEAD 2>/dev/null) with $(git status --porcelain 2>/dev/null | wc -l) changed files" \
    > "$DATA/commit.txt"
  PYTHONPATH=. python3 -m train prepare --config configs/multi30k.toml --data-dir "$DATA/prepared" "${M30K_FILES[@]}" \
    | tail -n 2 || exit
  for wheel in "${WHEELS[@]}"; do
    compgen -G ".whl/${wheel}-*.whl" > /dev/null && continue
    version=$(python3 -c "import importlib.metadata as m; print(m.version('$wheel'))" 2>/dev/null)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any \
      -d .whl "$wheel${version:+==$version}" || { echo "error: could not fetch the $wheel wheel" >&2; exit 2; }
  done
  local mib   # what the device tool sends: tracked and untracked-not-ignored files, and the carried paths
  mib=$(( ($(git ls-files -co --exclude-standard -z 2>/dev/null | xargs -0r cat | wc -c) \
           + $(du -cb "${CARRY[@]}" | tail -n 1 | cut -f1)) / 1048576 ))
  echo "ready: $(ls .whl | tr '\n' ' ')and $(du -sh "$DATA" | cut -f1) of data; working tree + carry ~${mib} MiB of 64"
  echo "the lease, one device call (ends within ${LIMIT_S} s; results in \$OUT/lease.jsonl as each lane ends):"
  echo "  run(command=\"bash benchmarks/gpu_lease.sh run\", carry=[\"${CARRY[0]}\", \"${CARRY[1]}\"], timeout_s=${TOOL_TIMEOUT_S})"
  echo "a focused rerun: the same with \"run LANE...\" (lanes: ${LANES[*]//+/ }) and a smaller timeout_s"
}

case "${1:-}" in
  prepare) prepare ;;
  plan)
    mode=plan
    printf '# limit %s\treserve %s\ttimeout_s %s\tgroups %s\n' "$LIMIT_S" "$RESERVE_S" "$TOOL_TIMEOUT_S" "${LANES[*]}"
    call
    grid=table3 run_lane ablate ;;
  run)
    shift
    for name in "$@"; do
      [[ " ${LANES[*]//+/ } " == *" $name "* ]] || { echo "error: no lane $name (lanes: ${LANES[*]//+/ })" >&2; exit 2; }
    done
    setup; call "$@"; finish ;;
  ablate)
    case "${2:-table3}" in table3 | recipe) grid=${2:-table3} ;; *) echo "usage: $0 ablate table3|recipe" >&2; exit 2 ;; esac
    setup; run_lane ablate; finish ;;
  *) echo "usage: $0 prepare|run [LANE...]|plan|ablate table3|recipe" >&2; exit 2 ;;
esac
