#!/usr/bin/env bash
# The GPU walks of "attention backward for training" (docs/attention_backward.md) and
# "Mamba2 end to end" (docs/mamba2.md), on one machine with a GPU. Run from the repository
# root with the service's packages importable and mamba_ssm's Triton kernels on PYTHONPATH
# (PYTHONPATH=.:.peers); logs and results go to $OUT (default ./ssd-training-acceptance).
#
#   tests        the backward's and the Mamba2 drop-in's GPU tests (every kernel against
#                the fp32 reference; the pipeline tuned from an empty cache serving the
#                drop-in; the training checks);
#   backward     bench/attention_backward.py over the suite's shapes in LAYOUTS (default
#                bhsd, what the training bench pairs with the forward's results), with
#                each structure's twins at the knobs TWINS names (e.g. "order persistent");
#   training     bench/attention_training.py: forward plus backward of one layer against
#                SDPA (cuDNN), on the kernels the suites kept (FORWARD_RESULTS and the
#                backward step's results);
#   bwd-speed    bench/tuning_speed.py on two backward cases;
#   ssd-CASE     bench/mamba2_ssd.py on one case (its three kernels tuned from an empty
#                cache, SSD_SECONDS each, then the forward against mamba_ssm's), e.g.
#                ssd-suite-8x4096; `python3 bench/mamba2_ssd.py list` names them;
#   ssd-speed    bench/tuning_speed.py on two mamba2_ssd cases (the whole forward's
#                kernels, one after the other, within SSD_SPEED_SECONDS).
#
# A case of bench/mamba2_ssd.py takes about 130 s (three tunes and the timing), so a
# device call of ten minutes holds about four. STEPS picks what a call runs, in its order;
# each step has a time cap so the next ones still run if one hangs.
set -u
OUT=${OUT:-$PWD/ssd-training-acceptance}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-.:.peers}
STEPS=${STEPS:-tests backward training}
CAP=${CAP:-300}
LAYOUTS=${LAYOUTS:-bhsd}
FORWARD_RESULTS=${FORWARD_RESULTS:-bench/results/attention-suite-bhsd-2026-12-05.json}
BWD_SPEED_CASES=${BWD_SPEED_CASES:-attention_backward:8x32x8x2048x128c-bhsd \
attention_backward:1x32x32x8192x128-bhsd}
SSD_SECONDS=${SSD_SECONDS:-8}
SSD_SPEED_CASES=${SSD_SPEED_CASES:-mamba2_ssd:8x4096x80x64x128x256 \
mamba2_ssd:8x4096x80x64x128x256g8}
SSD_SPEED_SECONDS=${SSD_SPEED_SECONDS:-60}

. "$(dirname "$0")/acceptance_steps.sh"

for name in $STEPS; do
  case $name in
    tests)
      step "GPU tests: attention backward, training, Mamba2 drop-in"
      gpu_tests "${TESTS_CAP:-300}" 20 -n 8 tests/codegen/test_attention_backward_gpu.py \
        tests/pipetune/test_attention_training_gpu.py tests/pipetune/test_mamba2_drop_in_gpu.py
      ;;
    backward)
      step "bench/attention_backward.py ($LAYOUTS)"
      # shellcheck disable=SC2086  # LAYOUTS and TWINS (knobs, may be empty) are lists
      timeout "$CAP" python3 bench/attention_backward.py --jobs "$(nproc)" --layouts $LAYOUTS \
        --twins ${TWINS:-} \
        --out "$OUT/attention-backward.json" > "$OUT/backward.log" 2>&1
      echo "exit $?"; tail -30 "$OUT/backward.log"
      ;;
    training)
      step "bench/attention_training.py"
      timeout "$CAP" python3 bench/attention_training.py --forward-results "$FORWARD_RESULTS" \
        --backward-results "$OUT/attention-backward.json" --rounds 3 \
        --out "$OUT/attention-training.json" > "$OUT/training.log" 2>&1
      echo "exit $?"; tail -20 "$OUT/training.log"
      ;;
    bwd-speed)
      step "tuning speed on $BWD_SPEED_CASES"
      # shellcheck disable=SC2086  # a list of cases
      timeout "$CAP" python3 bench/tuning_speed.py --cases $BWD_SPEED_CASES --seconds 60 \
        --dtype bfloat16 --out "$OUT/tuning_speed-backward.json" > "$OUT/bwd-speed.log" 2>&1
      echo "exit $?"; tail -4 "$OUT/bwd-speed.log"
      ;;
    ssd-speed)
      step "tuning speed on $SSD_SPEED_CASES"
      # shellcheck disable=SC2086  # a list of cases
      timeout "$CAP" python3 bench/tuning_speed.py --cases $SSD_SPEED_CASES \
        --seconds "$SSD_SPEED_SECONDS" --dtype bfloat16 \
        --out "$OUT/tuning_speed-mamba2_ssd.json" > "$OUT/ssd-speed.log" 2>&1
      echo "exit $?"; tail -4 "$OUT/ssd-speed.log"
      ;;
    ssd-*)
      case_name=${name#ssd-}
      step "bench/mamba2_ssd.py $case_name"
      timeout "$CAP" python3 bench/mamba2_ssd.py run --only "$case_name" \
        --seconds "$SSD_SECONDS" --rounds 3 --out "$OUT/mamba2-ssd-$case_name.json" \
        > "$OUT/$name.log" 2>&1
      echo "exit $?"; tail -8 "$OUT/$name.log"
      ;;
    *)
      echo "unknown step $name" >&2
      ;;
  esac
done
