# What the GPU walks (bench/*_acceptance.sh) share; each sources this file and sets OUT.

# step TITLE: a step's heading in the log, with the time it began.
step() { echo; echo "=== $1 ($(date -u +%T))"; }

# gpu_tests CAP LINES PYTEST_ARGS...: the GPU tests PYTEST_ARGS name, stopped after CAP
# seconds; the last LINES lines of their report printed and kept in $OUT/gpu_tests.txt.
gpu_tests() {
  local cap=$1 lines=$2
  shift 2
  timeout "$cap" python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts="" "$@" 2>&1 \
    | tail -"$lines" | tee "$OUT/gpu_tests.txt"
}
