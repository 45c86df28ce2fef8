#!/usr/bin/env bash
# Every GPU measurement the open issues ask for (#15 speed, #18 ablations, #14 data parallel), in device
# calls that each fit the 10-minute limit.
# Run on the device machine from the repo root; results land in $OUT (or ./gpu_out):
#   bash benchmarks/gpu_session.sh check     # GPU tests (kernels, cupy_blas, bf16), then the kernel table:
#                                            # GB/s vs the measured copy bandwidth (softmax, layernorm fwd+bwd,
#                                            # cross-entropy, bf16_cast) and cupy.matmul vs cupy_blas TFLOP/s (~8 min)
#   bash benchmarks/gpu_session.sh step      # base step bf16 / fp16 / fp32 vs PyTorch (bf16 autocast, fp32, TF32)
#                                            # in the same run; per-op profile; kernel counts from nsys if present (~7 min)
#   bash benchmarks/gpu_session.sh multi30k bf16   # Multi30k in bf16, averaged, test BLEU, training time (~5 min)
#   bash benchmarks/gpu_session.sh multi30k fp32   # the same in fp32: the ±0.5 BLEU comparison (~5 min)
#   bash benchmarks/gpu_session.sh ablate [table3|recipe]  # issue #18 on Multi30k: Table 3 rows A, D (9 runs x
#       2,000 steps, STEPS=...; est. 20-25 min) or the recipe grid (10 runs x 3,000); repeat the call until it
#       prints "grid complete". Each call resumes the grid; <grid>_state.tar in $OUT, carried back as
#       .device_data/<grid>_state.tar, lets a cold machine skip the finished variants.
#   bash benchmarks/gpu_session.sh dp        # issue #14: data-parallel tests (CPU ranks + NCCL on this GPU),
#                                            # fit through NCCL world size 1 vs no communicator (<= 2%),
#                                            # NCCL all-reduce, 1-8 GPU projection of the base step (~5 min)
# multi30k and ablate need ../shared/data/multi30k, or a copy carried as .device_data/multi30k.
# Each part stops at its own time limit (timeout) and keeps what it wrote, so a slow part never
# costs the next one.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu_out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore PYTHONPATH=.
pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || pip install -q --no-deps -e .
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.csv"

case "${1:-check}" in
check)
  timeout 300 python -m pytest -q -p no:cacheprovider -x -m gpu tests/kernels tests/test_cupy_blas_gpu.py \
      2>&1 | tail -15 | tee "$out/tests_gpu.txt"
  timeout 120 python -m pytest -q -p no:cacheprovider -x tests/test_backends.py tests/test_launch_count.py \
      tests/test_gradcheck_ops.py tests/transformer/test_composed_vs_fused.py 2>&1 | tail -5 | tee "$out/tests.txt"
  timeout 200 python benchmarks/bench_gpu_kernels.py --json "$out/kernels.json" 2>&1 | tee "$out/kernels.txt"
  ;;
step)
  for precision in bf16 fp16 fp32; do   # each prints its launches_per_step (the counting model) and the peers
    timeout 150 python -m train bench --backend cuda --precision "$precision" --steps 10 --warmup 3 --json \
        | tee "$out/step_$precision.json"
  done
  timeout 90 python -m train bench --backend cuda --precision bf16 --steps 3 --no-peer --profile | tee "$out/profile_bf16.txt"
  if command -v nsys >/dev/null; then   # the real kernel count: 1 + 1 warm-up + 3 timed steps
    timeout 120 nsys profile --stats=true --force-overwrite true -o "$out/nsys_bf16" \
        python -m train bench --backend cuda --precision bf16 --steps 3 --warmup 1 --no-peer \
        > "$out/nsys_bf16.txt" 2>&1
    grep -A 40 "cuda_gpu_kern_sum" "$out/nsys_bf16.txt" | head -45
  fi
  ;;
multi30k)
  [ -d ../shared/data/multi30k ] || { mkdir -p ../shared/data && cp -r .device_data/multi30k ../shared/data/; }
  precision=${2:-bf16}
  run=runs/multi30k_$precision
  start=$SECONDS
  timeout 480 python -m train fit --config configs/multi30k.toml --backend cuda --set train.precision=$precision \
      --run-dir "$run" --force --no-progress 2>&1 | tail -6 | tee "$out/fit_$precision.txt"
  echo "training time: $((SECONDS - start)) s ($precision)" | tee -a "$out/fit_$precision.txt"
  python -m train average "$run" --last 5 --out "$run/avg.safetensors" --force
  timeout 90 python -m train evaluate --ckpt "$run/avg.safetensors" --backend cuda \
      --src ../shared/data/multi30k/test_2016_flickr.en.gz --ref ../shared/data/multi30k/test_2016_flickr.de.gz \
      | tee "$out/bleu_$precision.txt"
  ;;
ablate)
  [ -d ../shared/data/multi30k ] || { mkdir -p ../shared/data && cp -r .device_data/multi30k ../shared/data/; }
  grid=${2:-table3}
  case "$grid" in
  table3) args=(--grid table3 --rows A,D --steps "${STEPS:-2000}") ;;
  recipe) args=(--grid recipe --steps "${STEPS:-3000}") ;;
  *) echo "usage: $0 ablate table3|recipe" >&2; exit 2 ;;
  esac
  dir=runs/$grid-multi30k-gpu
  if [ ! -d "$dir" ] && [ -f ".device_data/${grid}_state.tar" ]; then   # a cold machine: the finished variants
    mkdir -p "$dir" && tar -xf ".device_data/${grid}_state.tar" -C "$dir"
  fi
  start=$SECONDS
  # SIGTERM before the 10-minute limit: fit finishes its update and checkpoints, the grid stops, the table is written
  timeout --signal=TERM --kill-after=30 "${BUDGET_S:-500}" \
    python -m train ablate "${args[@]}" --config configs/multi30k.toml --backend cuda --out "$dir" --no-progress \
    2>&1 | grep -E '^\[|^\||^(stopped|wrote|error|model:)' | tee -a "$out/ablate_$grid.log"
  echo "this call: $((SECONDS - start)) s" | tee -a "$out/ablate_$grid.log"
  cp "$dir/grid.txt" "$out/" 2>/dev/null
  for ext in md csv png; do cp "$dir/$grid.$ext" "$out/" 2>/dev/null; done
  tar -cf "$out/${grid}_state.tar" -C "$dir" grid.txt results 2>/dev/null
  if [ -f "$dir/$grid.csv" ] && ! grep -q ',pending,' "$dir/$grid.csv"; then echo "grid complete"
  else echo "grid not complete: run the same call again"; fi
  ;;
dp)
  # Two NCCL ranks cannot share one GPU: multi-rank runs on CPU ranks (MPI), NCCL with one rank here.
  python -c "from mpi4py import MPI" 2>/dev/null || pip install -q mpi4py mpich 2>&1 | tail -1   # mpi4py alone lacks an MPI
  python -m pytest -q -p no:cacheprovider -rs tests/train/distributed 2>&1 | tail -8 | tee "$out/dp_tests.txt"
  PYTHONPATH=. python benchmarks/bench_data_parallel.py --json "$out/dp_overhead.json" 2>&1 | tee "$out/dp_overhead.txt"
  python -m train scale --backend cuda --link nvlink4 --link pcie5 --json > "$out/scale.json"
  PYTHONPATH=. python -c "import json, sys; from train.experiments.scale_report import format_report; \
print(format_report(json.load(open(sys.argv[1]))))" "$out/scale.json" | tee "$out/scale.txt"
  ;;
*) echo "usage: $0 check|step|multi30k [bf16|fp32|fp16]|ablate [table3|recipe]|dp" >&2; exit 2 ;;
esac
