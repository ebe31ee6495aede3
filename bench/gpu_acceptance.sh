#!/usr/bin/env bash
# The GPU acceptance walk of "tune on the GPU end to end", on one machine with a GPU, from
# empty databases and empty kernel caches. Run from the repository root with the service's
# packages importable (PYTHONPATH=.); logs and results go to $OUT (default ./gpu-acceptance).
#
#   1. the GPU tests (load() vs torch.matmul, pipetune tune end to end, the executor
#      contract on the local GPU pool);
#   2. pipetune tune gemm 4096^3 fp16 from an empty database (latency, speed vs cuBLAS);
#   3. the same through POST /v1/tune on pipetune serve, then GET /v1/kernels/{hash} and a
#      user script that runs the kernel on new inputs through workers.load and compares
#      it with torch.matmul;
#   4. bench/tuning_speed.py on three GEMM suite shapes (time to within 2% of the best).
#
# Each step has a time cap so that the next ones still run if one hangs.
set -u
OUT=${OUT:-$PWD/gpu-acceptance}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-.}
SECONDS_PER_SHAPE=${SECONDS_PER_SHAPE:-60}
STEPS=${STEPS:-tests cli serve bench}
SHAPES=${SHAPES:-4096x4096x4096 8192x8192x8192 4000x6000x2000}
WORK=$(mktemp -d /tmp/pipetune-acceptance.XXXX)

. "$(dirname "$0")/acceptance_steps.sh"

nvidia-smi -L
python3 -c 'import cupy, torch; print("cupy", cupy.__version__, "torch", torch.__version__)'

if [[ " $STEPS " == *" tests "* ]]; then
  step "GPU tests"
  gpu_tests "${TESTS_CAP:-100}" 40 tests/workers/test_load_gpu.py tests/service/test_gpu_tune.py \
    tests/workers/test_executor_contract.py -rA
fi

if [[ " $STEPS " == *" cli "* ]]; then
  step "pipetune tune gemm 4096^3 from an empty database"
  mkdir -p "$WORK/cli"
  started=$(date +%s.%N)
  PIPETUNE_DATA_DIR="$WORK/cli" timeout ${CLI_CAP:-100} \
    python3 -m service.cli tune gemm --m 4096 --n 4096 --k 4096 --dtype float16 \
    --database-url "sqlite:///$WORK/cli/pipetune.db" --kernel-out "$WORK/kernel_cli.json" \
    2>&1 | tr '\r' '\n' | grep -v '^ *$' | tail -12 | tee "$OUT/cli.txt"
  echo "command wall: $(python3 -c "import time; print(round(time.time() - $started, 1))") s" \
    | tee -a "$OUT/cli.txt"
fi

if [[ " $STEPS " == *" serve "* ]]; then
  step "POST /v1/tune on pipetune serve, fetch the kernel, run it"
  mkdir -p "$WORK/serve"
  PIPETUNE_DATA_DIR="$WORK/serve" python3 -m service.cli serve --port 8765 \
    --database-url "sqlite:///$WORK/serve/pipetune.db" > "$OUT/serve.log" 2>&1 &
  SERVER=$!
  timeout ${SERVE_CAP:-110} python3 bench/gpu_acceptance_client.py http://127.0.0.1:8765 "$OUT" \
    2>&1 | tee "$OUT/serve_walk.txt"
  kill "$SERVER"; wait "$SERVER" 2>/dev/null
fi

if [[ " $STEPS " == *" bench "* ]]; then
  step "bench/tuning_speed.py: $SHAPES, $SECONDS_PER_SHAPE s each"
  # shellcheck disable=SC2086
  timeout ${BENCH_CAP:-250} python3 bench/tuning_speed.py --shapes $SHAPES --seconds "$SECONDS_PER_SHAPE" \
    --out "$OUT/tuning_speed.json" 2>&1 | grep -v "^ *$" | tail -20 | tee "$OUT/bench.txt"
fi
step done
