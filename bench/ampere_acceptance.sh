#!/usr/bin/env bash
# The GPU walk of issue 48 (docs/codegen.md, "The Ampere-class target"): Ampere-class code
# (sm_80) run on the lent Hopper GPU, as ``cuda:0@sm_80`` runs it. Run from the repository
# root with the service's packages importable (PYTHONPATH=.); logs and results go to $OUT
# (default ./ampere-acceptance).
#
#   tests        the Ampere GPU tests (sm_80 and sm_89 code of every operator against the
#                fp32 reference) and the exported sm_80 GEMM's example;
#   gemm         bench/gemm.py on the suite (fp16 and bf16, both layouts) planned for
#                h200@sm_80, against CUTLASS 2.x's multistage sm_80 GEMM (cutlass_sm80:
#                CUTLASS_LIB, built from bench/cutlass/sm80_gemm.cu as its header says);
#   attention-LAYOUT  bench/attention.py's suite in one layout planned for h200@sm_80,
#                against FlashAttention-2 (SDPA's flash backend, an sm_80 design) and cuDNN;
#   mamba2       bench/mamba2.py planned for h200@sm_80 against the Triton kernels.
#
# Candidates are ranked and rendered here with JOBS processes (prepare), then measured.
set -u
OUT=${OUT:-$PWD/ampere-acceptance}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-.}
export PIPETUNE_CUTLASS_SM80_LIB=${CUTLASS_LIB:-$PWD/.peers/cutlass/libsm80_gemm.so}
STEPS=${STEPS:-tests gemm}
JOBS=${JOBS:-$(nproc)}
CAP=${CAP:-540}
DEVICE=h200@sm_80
CANDIDATES=$(mktemp -d /tmp/pipetune-ampere.XXXX)

. "$(dirname "$0")/acceptance_steps.sh"

for name in $STEPS; do
  case $name in
    tests)
      step "Ampere-class GPU tests"
      gpu_tests "${TESTS_CAP:-400}" 20 -n 8 tests/codegen/test_ampere_gpu.py \
        tests/codegen/test_export.py -k "ampere or sm80"
      ;;
    gemm)
      step "bench/gemm.py on $DEVICE against cutlass_sm80"
      timeout "$CAP" sh -c "python3 bench/gemm.py prepare --device $DEVICE \
        --out $CANDIDATES/gemm.json.gz && python3 bench/gemm.py run \
        --candidates $CANDIDATES/gemm.json.gz --peer cutlass_sm80 \
        --out $OUT/gemm-sm80.json" > "$OUT/gemm.log" 2>&1
      echo "exit $?"; tail -24 "$OUT/gemm.log"
      ;;
    attention-bshd|attention-bhsd)
      layout=${name#attention-}
      step "bench/attention.py suite ($layout) on $DEVICE"
      timeout "$CAP" sh -c "python3 bench/attention.py prepare --device $DEVICE \
        --layouts $layout --top 4 --jobs $JOBS --out $CANDIDATES/$name.json.gz && \
        python3 bench/attention.py run --candidates $CANDIDATES/$name.json.gz \
        --out $OUT/attention-sm80-$layout.json" > "$OUT/$name.log" 2>&1
      echo "exit $?"; tail -14 "$OUT/$name.log"
      ;;
    mamba2)
      step "bench/mamba2.py on $DEVICE"
      timeout "$CAP" sh -c "python3 bench/mamba2.py prepare --device $DEVICE \
        --out $CANDIDATES/mamba2.json.gz && python3 bench/mamba2.py run \
        --candidates $CANDIDATES/mamba2.json.gz --out $OUT/mamba2-sm80.json" \
        > "$OUT/mamba2.log" 2>&1
      echo "exit $?"; tail -12 "$OUT/mamba2.log"
      ;;
    *)
      echo "unknown step $name (tests gemm attention-bshd attention-bhsd mamba2)"
      ;;
  esac
done
rm -rf "$CANDIDATES"
