#!/usr/bin/env bash
# The GPU walk of "dynamic shapes" (docs/dynamic.md), on one machine with a GPU, from empty
# databases. Run from the repository root with the service's packages importable
# (PYTHONPATH=.); logs and results go to $OUT (default ./dynamic-acceptance).
#
#   1. the GPU tests of run-time sizes: masked tails at m = 1, 17, 255, 16383 (designs,
#      stream-K and swapped kernels), range kernels loaded and dispatched against torch,
#      attention range kernels against SDPA;
#   2. bench/dynamic.py for GEMM (fp16, then bf16) and attention (fp16, then bf16), each
#      in a process of its own, the range search's log beside its results;
#   3. (step "drawn") bf16 GEMM ranges on the (n, k) pairs drawn with seed 44, the pairs
#      DRAWN_PAIRS (default "0 1 2") in the layouts DRAWN_LAYOUTS (default "nk kn"), 16
#      unseen sizes each, all in one process (results written after each pair and
#      layout; about 80 s each on an H200, so two calls hold the six).
#
# Each figure is the median of ROUNDS interleaved rounds (default 3: with two, one slow
# round moved a 14 us kernel's back-to-back figure by 2 us). Each step has a time cap so
# that the next ones still run if one hangs; STEPS picks steps,
# run in its order (tests first when named: tests gemm-float16 gemm-bfloat16
# attention-float16 attention-bfloat16).
set -u
OUT=${OUT:-$PWD/dynamic-acceptance}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-.}
STEPS=${STEPS:-tests gemm-float16 gemm-bfloat16 attention-float16 attention-bfloat16}
BENCH_CAP=${BENCH_CAP:-240}

. "$(dirname "$0")/acceptance_steps.sh"

if [[ " $STEPS " == *" tests "* ]]; then
  step "GPU tests of run-time sizes"
  # A hang shows as the stacks faulthandler prints before the cap.
  timeout ${TESTS_CAP:-200} python3 -m pytest -q -m gpu -p no:cacheprovider -n 0 -rA \
    -o faulthandler_timeout=$(( ${TESTS_CAP:-200} - 20 )) ${GPU_TESTS:-\
    tests/workers/test_attention_range_load_gpu.py tests/workers/test_range_load_gpu.py \
    tests/codegen/test_runtime_sizes_gpu.py} 2>&1 | tail -40 | tee "$OUT/gpu_tests.txt"
fi

if [[ " $STEPS " == *" drawn "* ]]; then
  pairs=${DRAWN_PAIRS:-0 1 2}
  step "bench/dynamic.py on drawn pairs ${pairs} (${DRAWN_LAYOUTS:-nk kn})"
  # shellcheck disable=SC2086  # the lists are words
  timeout "$BENCH_CAP" python3 bench/dynamic.py --op gemm --dtypes bfloat16 --draw-pairs 3 \
    --pair-seed 44 --pair-indices $pairs --layouts ${DRAWN_LAYOUTS:-nk kn} --sizes 16 \
    --keep-db "$OUT/db" --out "$OUT/dynamic-drawn-${pairs// /}.json" \
    > "$OUT/drawn-${pairs// /}.log" 2>&1
  echo "exit $?"; grep "range run" "$OUT/drawn-${pairs// /}.log"
fi

for op_dtype in $STEPS; do
  [[ $op_dtype == tests || $op_dtype == drawn ]] && continue
  op=${op_dtype%%-*}; dtype=${op_dtype#*-}
  step "bench/dynamic.py $op $dtype"
  # Processes still on the GPU (a second bench process once ran 5-10x slower than the
  # first: 192 measurements in 108 s against 384 in 16 s).
  { nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
    ps -eo pid,ppid,pcpu,etime,args --sort=-pcpu | head -12; } > "$OUT/$op_dtype.log" 2>&1
  if [[ $op == gemm ]]; then
    search='{"sizes": 16}'; budget="--trials ${GEMM_TRIALS:-860} --seconds 90"
  else
    search='{"sizes": 12}'; budget="--trials ${ATTENTION_TRIALS:-384} --seconds 90"
  fi
  PIPETUNE_RANGE_SEARCH=$search timeout "$BENCH_CAP" python3 bench/dynamic.py --op "$op" \
    --dtypes "$dtype" $budget --rounds ${ROUNDS:-3} --cool-down-s 0.05 --log-level info \
    --keep-db "$OUT/db" --out "$OUT/dynamic-$op_dtype.json" >> "$OUT/$op_dtype.log" 2>&1
  echo "exit $?"; grep "range run" "$OUT/$op_dtype.log" | tail -1
done

# PACK=1: the logs and databases in one archive (a device call brings back 8 files).
if [[ ${PACK:-0} == 1 ]]; then
  (cd "$OUT" && shopt -s nullglob && files=(*.log gpu_tests.tx[t] d[b]) &&
   ((${#files[@]})) && tar czf logs.tgz "${files[@]}" && rm -rf "${files[@]}")
fi
