#!/usr/bin/env bash
# The GPU walk of "decode GEMMs" (docs/gemm.md, docs/timing.md), on one machine with a GPU,
# from empty databases. Run from the repository root with the service's packages importable
# (PYTHONPATH=.); logs and results go to $OUT (default ./decode-acceptance).
#
#   tests   the graph timing's GPU tests and the decode kernels' correctness (every decode
#           design, bf16 / fp16 / e4m3, checked against the fp32 reference);
#   speed   bench/tuning_speed.py on two decode cases (seconds until within 2% of the best);
#   MODEL-DTYPE   bench/decode.py for one model's layers in one dtype (e.g. llama-3-8b-bfloat16,
#           mixtral-8x7b-float8_e4m3), every m of the suite unless M says fewer;
#   steps   each model's decode step (bench/decode.py --steps-from) on the kernels of the
#           results files STEPS_FROM names, for MODELS and DTYPES (default: all) at M;
#   profile Nsight Compute on PROFILE_CASES of PROFILE_RESULTS (bench/decode_profile.py):
#           pipetune's kernel and the peer side by side;
#   timeline  each block's start, first stream-K part and end for PROFILE_CASES of
#           PROFILE_RESULTS (bench/decode_timeline.py).
#
# Run "speed" after "tests": on a freshly started machine the first tune also pays CuPy's
# one-time compiles of its own kernels (2026-12-04: 15.6 s to the first result on a fresh
# H200), which a machine that has run anything before does not.
#
# The whole suite (3 models x 2 dtypes x 9 m) takes about 30 minutes of GPU time at 6 s of
# search a case: more than one device session holds, so STEPS picks what a session runs,
# in its order. Each step has a time cap so that the next ones still run if one hangs.
set -u
OUT=${OUT:-$PWD/decode-acceptance}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-.}
STEPS=${STEPS:-tests speed llama-3-8b-bfloat16}
M=${M:-1 2 4 8 16 32 64 128 256}
SECONDS_A_CASE=${SECONDS_A_CASE:-6}
BENCH_CAP=${BENCH_CAP:-540}

. "$(dirname "$0")/acceptance_steps.sh"

for name in $STEPS; do
  case $name in
    tests)
      step "GPU tests: graph timing, decode kernels"
      gpu_tests "${TESTS_CAP:-300}" 30 tests/workers/test_graph_timing_gpu.py \
        tests/codegen/test_gemm_gpu.py -k "graph or decode or bandwidth or replay or copies"
      ;;
    speed)
      step "tuning speed on decode cases"
      timeout "$BENCH_CAP" python3 bench/tuning_speed.py --cases gemm:1x4096x4096 \
        gemm:16x14336x4096 --seconds 20 --dtype bfloat16 --layout nk \
        --out "$OUT/tuning_speed-decode.json" > "$OUT/speed.log" 2>&1
      echo "exit $?"; tail -4 "$OUT/speed.log"
      ;;
    profile)
      step "Nsight Compute: pipetune and the peer on ${PROFILE_CASES:-every case}"
      # shellcheck disable=SC2086  # PROFILE_CASES is a list of case names
      timeout "$BENCH_CAP" ncu --nvtx --nvtx-include "pipetune/" --nvtx-include "peer/" \
        --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
        python3 bench/decode_profile.py --results "${PROFILE_RESULTS:?a decode results file}" \
        --cases ${PROFILE_CASES:-} > "$OUT/ncu-decode.txt" 2>&1
      echo "exit $?"; grep -c "Duration" "$OUT/ncu-decode.txt"
      ;;
    timeline)
      step "block clock: ${PROFILE_CASES:-every case}"
      # shellcheck disable=SC2086  # PROFILE_CASES is a list of case names
      timeout "$BENCH_CAP" python3 bench/decode_timeline.py --results \
        "${PROFILE_RESULTS:?a decode results file}" --cases ${PROFILE_CASES:-} \
        --out "$OUT/decode-timeline.json" > "$OUT/timeline.log" 2>&1
      echo "exit $?"; tail -4 "$OUT/timeline.log"
      ;;
    steps)
      step "model steps on the kernels of ${STEPS_FROM:?results files of earlier decode runs}"
      # shellcheck disable=SC2086  # STEPS_FROM and M are lists
      timeout "$BENCH_CAP" python3 bench/decode.py --steps-from $STEPS_FROM \
        --models ${MODELS:-llama-3-8b llama-3-70b-tp8 mixtral-8x7b} \
        --dtypes ${DTYPES:-bfloat16 float8_e4m3} --m $M --rounds ${ROUNDS:-3} \
        --out "$OUT/decode-steps.json" > "$OUT/steps.log" 2>&1
      echo "exit $?"; tail -12 "$OUT/steps.log"
      ;;
    *)
      model=${name%-*}; dtype=${name##*-}
      step "bench/decode.py $model $dtype"
      # shellcheck disable=SC2086  # M is a list of sizes
      timeout "$BENCH_CAP" python3 bench/decode.py --models "$model" --dtypes "$dtype" \
        --m $M --seconds "$SECONDS_A_CASE" --rounds ${ROUNDS:-3} \
        --out "$OUT/decode-$name.json" > "$OUT/$name.log" 2>&1
      echo "exit $?"; tail -6 "$OUT/$name.log"
      ;;
  esac
done
