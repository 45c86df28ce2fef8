#!/usr/bin/env bash
# The GPU lease: every GPU measurement the project owes, in two commands on one warm
# machine. A lease is rare and short (15 device minutes in all, the machine's start included; one
# command at most 10 minutes; no package registry; only the working tree travels, not ../shared):
#
#   bash benchmarks/gpu_lease.sh prepare   # here, on the CPU, first: Multi30k and its prepared data
#                                          # into .device_data/, the wheels the GPU image lacks into
#                                          # .whl/ (both ignored by git); prints the two device calls
#   bash benchmarks/gpu_lease.sh call1     # device call 1 (<= 7 min): every GPU test (pytest -m gpu:
#                                          # kernels, cuBLAS, bf16, composed vs fused, NCCL with one
#                                          # rank) while Multi30k trains in bf16 beside it, twice: the
#                                          # README's recipe (fp32 gave 37.2) and P_drop 0.3 (aimed at
#                                          # the PyTorch peer's 39.3); each averaged, test2016 BLEU
#   bash benchmarks/gpu_lease.sh call2     # device call 2 (<= 4 min), at once after call 1 (the
#                                          # machine stays warm 30 s): the base step in bf16 and fp32
#                                          # against PyTorch in the same run (peak memory too), a
#                                          # per-op profile, NCCL world size 1 through fit vs no
#                                          # communicator, a short kernel GB/s table, cuBLAS plans
#                                          # and a CUDA graph of the base forward + backward
#   bash benchmarks/gpu_lease.sh plan      # each call's parts (lane, name, timeout, command): what
#                                          # tests/test_gpu_lease.py checks on the CPU
#   bash benchmarks/gpu_lease.sh ablate table3|recipe   # Table 3 on Multi30k: a lease
#       of its own (est. 20-25 min: several leases); each call resumes the grid from the
#       <grid>_state.tar it left in $OUT, carried back as .device_data/<grid>_state.tar.
#
# Parts in one lane run one after another; the lanes of a call run side by side. Every part has its
# own timeout, and each lane's timeouts sum to at most the call's limit less a reserve for the
# set-up and packing, so a slow part never costs the next one, and the call ends before the device
# tool's limit. Results: runs/lease/<call>/ (a log per part), packed at the end into
# $OUT/<call>.tar.gz beside $OUT/<call>_summary.txt (OUT defaults to runs/lease; the device tool
# brings back at most 8 files from $OUT). No network on the device: wheels come from .whl/.
set -uo pipefail
cd "$(dirname "$0")/.."

CALL1_LIMIT=420 CALL2_LIMIT=240 RESERVE=30       # seconds; the device tool's timeout_s is set above these
CALL1_TIMEOUT_S=450 CALL2_TIMEOUT_S=270
CARRY=(.device_data .whl)
WHEELS=(sacremoses)                               # what the GPU image lacks (KINDS.md): paper BLEU's tokenizer
DATA=.device_data
M30K=$DATA/multi30k
M30K_FILES=(--set task.kind=files --set "task.train_src=$M30K/train.en.gz" --set "task.train_tgt=$M30K/train.de.gz"
            --set "task.valid_src=$M30K/val.en.gz" --set "task.valid_tgt=$M30K/val.de.gz"
            --set "task.test_src=$M30K/test_2016_flickr.en.gz" --set "task.test_tgt=$M30K/test_2016_flickr.de.gz")
mode=run lane=main work= summary=

part() {  # part NAME TIMEOUT_S COMMAND...: run COMMAND under its timeout (SIGTERM: fit checkpoints and stops)
  local name=$1 limit=$2
  shift 2
  if [ "$mode" = plan ]; then
    printf '%s\t%s\t%s\t%s\n' "$lane" "$name" "$limit" "$*"
    return 0
  fi
  local start=$SECONDS rc line
  timeout --signal=TERM --kill-after=10 "$limit" "$@" < /dev/null > "$work/$name.txt" 2> "$work/$name.err"
  rc=$?
  line=$(printf '%-24s rc %3d %5d s of %4d s' "$name" "$rc" $((SECONDS - start)) "$limit")
  [ "$rc" = 0 ] || line+=$'\n'$(tail -n 4 "$work/$name.err" | cut -c1-300 | sed 's/^/    /')
  printf '%s\n' "$line" >> "$summary"     # one write: lanes append side by side
  return "$rc"
}

lanes() {  # lanes FUNCTION...: one lane each, side by side (a plan lists them one after another)
  local fn
  for fn in "$@"; do
    if [ "$mode" = plan ]; then lane=$fn "$fn"; else lane=$fn "$fn" & fi
  done
  wait
}

have() { python3 -c "import $1" 2>/dev/null; }

setup() {  # the wheels, the summary, the device
  work=runs/lease/$1
  rm -rf "$work" && mkdir -p "$work" "${OUT:-runs/lease}"
  summary=${OUT:-runs/lease}/$1_summary.txt
  : > "$summary"
  export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore PYTHONPATH=.
  if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      && export PYTHONPATH=.:/tmp/site
  fi
  { date -u +"%Y-%m-%d %H:%M UTC"; cat "$DATA/commit.txt" 2>/dev/null   # no .git on the device: prepare wrote it
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader 2>&1
  } | tee -a "$summary"
}

finish() {  # the end of each part's output, in the order they ended, then everything packed into $OUT
  local log
  for log in $(ls -tr "$work"/*.txt); do
    printf '\n== %s\n' "$(basename "$log" .txt)"
    tail -n "${1:-4}" "$log"
  done
  printf '\n== summary\n' && cat "$summary"
  tar -czf "${OUT:-runs/lease}/$(basename "$work").tar.gz" -C "$work" .
}

# ---- call 1 ------------------------------------------------------------------------------------
gpu_tests() {
  local parallel=() guard=()
  have xdist && parallel=(-n 4 --dist loadfile)       # on the GPU image: compiling and testing 4 files at once
  have pytest_timeout && guard=(--timeout 240)         # a hang guard per test (NCCL waits forever otherwise)
  part gpu_tests 340 python3 -m pytest -p no:cacheprovider -m gpu -v -rfEs --maxfail=100 --durations=15 \
    --continue-on-collection-errors "${parallel[@]}" "${guard[@]}" tests
}

multi30k() {  # multi30k NAME --set ...: fit in bf16, average the last 5 checkpoints (§6.1), test2016 BLEU
  local name=$1 run=runs/lease_$1
  shift
  part "${name}_fit" 270 python3 -m train fit --config configs/multi30k.toml --backend cuda --run-dir "$run" \
    --data-dir "$DATA/prepared" --force --no-progress "${M30K_FILES[@]}" --set train.precision=bf16 "$@"
  part "${name}_average" 20 python3 -m train average "$run" --last 5 --out "$run/averaged.safetensors" --force
  part "${name}_test2016" 90 python3 -m train evaluate --ckpt "$run/averaged.safetensors" --backend cuda \
    --src "$M30K/test_2016_flickr.en.gz" --ref "$M30K/test_2016_flickr.de.gz" --out "$work/${name}_test2016.de"
  [ "$mode" = plan ] || cp "$run/metrics.jsonl" "$work/${name}_metrics.jsonl" 2>/dev/null
}
m30k_readme() { multi30k m30k_readme; }                       # configs/multi30k.toml: fp32 37.2, fp16 37.7
m30k_p03() { multi30k m30k_p03 --set model.p_drop=0.3; }     # 29k pairs, ~50 epochs: more dropout (§6.2 D)

call1() { lanes gpu_tests m30k_readme m30k_p03; }

# ---- call 2: timings, one part at a time (nothing else on the GPU) -------------------------------
speed() {
  part step_bf16 50 python3 -m train bench --backend cuda --precision bf16 --steps 10 --warmup 3 --json
  part step_fp32 45 python3 -m train bench --backend cuda --precision fp32 --steps 5 --warmup 2 --json
  part profile_bf16 20 python3 -m train bench --backend cuda --precision bf16 --steps 3 --warmup 1 --no-peer --profile
  part nccl_fit 45 python3 benchmarks/bench_data_parallel.py --steps 40 --json "$work/nccl_fit.json"
  # the row kernels against the copy ceiling (softmax, LayerNorm, the fused sub-layer
  # connection both ways, bias + ReLU, the bias's column sums), then cuBLAS plans replayed and the
  # base forward + backward captured as a CUDA graph (gradients vs eager, GPU and host ms)
  part kernels 25 python3 benchmarks/bench_gpu_kernels.py --only softmax,layernorm,sublayer,bias \
    --json "$work/kernels.json"
  part graph 25 python3 benchmarks/bench_cuda_graph.py --json "$work/graph.json"
}

call2() { lanes speed; }

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
  echo "the lease, two device calls on one warm machine (call 2 within 30 s of call 1's reply):"
  for call in 1 2; do
    local limit=CALL${call}_TIMEOUT_S
    echo "  run(command=\"bash benchmarks/gpu_lease.sh call$call\", carry=[\"${CARRY[0]}\", \"${CARRY[1]}\"], timeout_s=${!limit})"
  done
  echo "each call's parts and timeouts: bash benchmarks/gpu_lease.sh plan"
}

# ---- ablate: Table 3's grids, a lease of their own --------------------------------------------
ablate() {
  local grid=${1:-table3} args dir
  case "$grid" in
    table3) args=(--grid table3 --rows A,D --steps 2000) ;;
    recipe) args=(--grid recipe --steps 3000) ;;
    *) echo "usage: $0 ablate table3|recipe" >&2; exit 2 ;;
  esac
  dir=runs/$grid-multi30k-gpu
  if [ ! -d "$dir" ] && [ -f "$DATA/${grid}_state.tar" ]; then   # a fresh machine: the finished variants
    mkdir -p "$dir" && tar -xf "$DATA/${grid}_state.tar" -C "$dir"
  fi
  # SIGTERM before the 10-minute limit: fit finishes its update and checkpoints, the grid stops, the table is written
  part "ablate_$grid" 500 python3 -m train ablate "${args[@]}" --config configs/multi30k.toml --backend cuda \
    --out "$dir" --no-progress "${M30K_FILES[@]}"
  for file in grid.txt "$grid.md" "$grid.csv" "$grid.png"; do cp "$dir/$file" "$work/" 2>/dev/null; done
  tar -cf "${OUT:-runs/lease}/${grid}_state.tar" -C "$dir" grid.txt results 2>/dev/null
  if [ -f "$dir/$grid.csv" ] && ! grep -q ',pending,' "$dir/$grid.csv"; then echo "grid complete" | tee -a "$summary"
  else echo "grid not complete: run the same call again" | tee -a "$summary"; fi
}

case "${1:-}" in
  prepare) prepare ;;
  plan)
    mode=plan
    for call in call1 call2; do
      limit=${call^^}_LIMIT work=runs/lease/$call
      printf '# %s\tlimit %s\treserve %s\n' "$call" "${!limit}" "$RESERVE"
      "$call"
    done ;;
  call1 | call2) setup "$1"; "$1"; finish ;;
  ablate) setup "ablate_${2:-table3}"; ablate "${2:-table3}"; finish 12 ;;
  *) echo "usage: $0 prepare|call1|call2|plan|ablate table3|recipe" >&2; exit 2 ;;
esac
