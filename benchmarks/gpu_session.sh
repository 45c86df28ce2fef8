#!/usr/bin/env bash
# Every GPU measurement issue #15 asks for, in four device calls that each fit the 10-minute limit.
# Run on the device machine from the repo root; results land in $OUT (or ./gpu_out):
#   bash benchmarks/gpu_session.sh check     # GPU tests (kernels, cupy_blas, bf16), then the kernel table:
#                                            # GB/s vs the measured copy bandwidth (softmax, layernorm fwd+bwd,
#                                            # cross-entropy, bf16_cast) and cupy.matmul vs cupy_blas TFLOP/s (~8 min)
#   bash benchmarks/gpu_session.sh step      # base step bf16 / fp16 / fp32 vs PyTorch (bf16 autocast, fp32, TF32)
#                                            # in the same run; per-op profile; kernel counts from nsys if present (~7 min)
#   bash benchmarks/gpu_session.sh multi30k bf16   # Multi30k in bf16, averaged, test BLEU, training time (~5 min)
#   bash benchmarks/gpu_session.sh multi30k fp32   # the same in fp32: the ±0.5 BLEU comparison (~5 min)
# multi30k needs ../shared/data/multi30k, or a copy carried as .device_data/multi30k.
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
*) echo "usage: $0 check|step|multi30k [bf16|fp32|fp16]" >&2; exit 2 ;;
esac
