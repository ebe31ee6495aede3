#!/usr/bin/env bash
# The GPU walk of "attention prefill" (docs/attention.md), on one machine with a GPU. Run
# from the repository root with the service's packages importable (PYTHONPATH=.); logs and
# results go to $OUT (default ./attention-acceptance).
#
#   tests       the attention GPU tests (every sampled and designed kernel, fp16 / bf16 /
#               e4m3, against the fp32 reference);
#   fp8         bench/attention_fp8.py: the suite's 4096 / 8192 cases in e4m3 against
#               pipetune's own bf16 kernel (BF16_RESULTS: the suite results its bf16
#               winners come from) and cuDNN on widened inputs;
#   heads       head sizes 64, 96 and 256 at 4 x 32(8) x 4096 against cuDNN;
#   suite-LAYOUT  the suite in one layout (bshd or bhsd) against cuDNN and FlashAttention-2;
#   speed       bench/tuning_speed.py on two suite cases in each layout.
#
# The candidates are ranked and rendered here (``prepare`` with JOBS processes), not
# carried: a suite's candidates file is about 26 MB, more than a device call carries beside
# the checkout. On 16 cores the suite's prepare takes about two minutes a layout. STEPS
# picks what a call runs, in its order; each step has a time cap so the next ones still
# run if one hangs.
set -u
OUT=${OUT:-$PWD/attention-acceptance}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-.}
STEPS=${STEPS:-tests fp8 heads}
JOBS=${JOBS:-$(nproc)}
CAP=${CAP:-540}
BF16_RESULTS=${BF16_RESULTS:-bench/results/attention-suite-bshd-2026-12-05.json}
SPEED_CASES=${SPEED_CASES:-attention:8x32x8x2048x128c attention:1x32x32x8192x128 \
attention:8x32x8x2048x128c-bhsd attention:1x32x32x8192x128-bhsd}
CANDIDATES=$(mktemp -d /tmp/pipetune-attention.XXXX)

. "$(dirname "$0")/acceptance_steps.sh"

for name in $STEPS; do
  case $name in
    tests)
      step "attention GPU tests"
      gpu_tests "${TESTS_CAP:-300}" 20 -n 8 tests/codegen/test_attention_gpu.py
      ;;
    fp8)
      step "FP8 against pipetune's bf16 ($BF16_RESULTS)"
      timeout "$CAP" sh -c "python3 bench/attention_fp8.py prepare --jobs $JOBS \
        --bf16-results $BF16_RESULTS --out $CANDIDATES/fp8.json.gz && \
        python3 bench/attention_fp8.py run --candidates $CANDIDATES/fp8.json.gz --top 8 \
        --rounds 3 --out $OUT/attention-fp8.json" > "$OUT/fp8.log" 2>&1
      echo "exit $?"; tail -12 "$OUT/fp8.log"
      ;;
    heads|suite-bshd|suite-bhsd)
      which=${name%%-*}; which=${which/heads/head-sizes}
      layout=bshd; [[ $name == suite-bhsd ]] && layout=bhsd
      step "bench/attention.py $which ($layout)"
      timeout "$CAP" sh -c "python3 bench/attention.py prepare --cases $which \
        --layouts $layout --top 4 --jobs $JOBS --out $CANDIDATES/$name.json.gz && \
        python3 bench/attention.py run --candidates $CANDIDATES/$name.json.gz \
        --out $OUT/attention-$name.json" > "$OUT/$name.log" 2>&1
      echo "exit $?"; tail -14 "$OUT/$name.log"
      ;;
    speed)
      step "tuning speed on $SPEED_CASES"
      # shellcheck disable=SC2086  # SPEED_CASES is a list of cases
      timeout "$CAP" python3 bench/tuning_speed.py --seconds ${SPEED_SECONDS:-40} \
        --cases $SPEED_CASES --out "$OUT/tuning_speed-attention.json" > "$OUT/speed.log" 2>&1
      echo "exit $?"; tail -8 "$OUT/speed.log"
      ;;
    *)
      echo "unknown step $name (tests fp8 heads suite-bshd suite-bhsd speed)"
      ;;
  esac
done
rm -rf "$CANDIDATES"
