#!/usr/bin/env bash
# Runs CUDA tests under compute-sanitizer: memcheck, racecheck, initcheck and synccheck, one pass
# each, and prints one summary line per tool. The caching allocator is off so memcheck sees every
# allocation's true bounds.
#
#   tools/sanitize.sh [pytest selection...]      default: the CUDA op, GEMV, recipe, swizzle,
#                                                  bad-input and determinism tests, without the
#                                                  2^31-element ones and two slow statistics
#                                                  tests (hours under memcheck)
#   SANITIZER_LOG_DIR=dir                          where the logs go (default: sanitizer-logs)
#   SANITIZER_TOOLS="memcheck racecheck"           a subset of the tools
#
# Tests that list the kernels a call launches (through the torch profiler, which does not run under
# the tools) skip at that point: FP4OPS_UNDER_SANITIZER is set for them.
#
# Exit status: 0 when every tool reports 0 errors and every pytest run passes, else 1.
set -u
log_dir=${SANITIZER_LOG_DIR:-sanitizer-logs}
tools=${SANITIZER_TOOLS:-memcheck racecheck initcheck synccheck}
if [ "$#" -eq 0 ]; then
  set -- tests/test_cuda_ops.py tests/test_gemv.py tests/test_recipe.py tests/test_swizzle.py \
    tests/test_bad_inputs.py tests/test_determinism.py -k "not more_than_2_pow_31 and not unbiased and not 4352"
fi
mkdir -p "$log_dir"
status=0
for tool in $tools; do
  FP4OPS_UNDER_SANITIZER=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool "$tool" --target-processes all \
    --log-file "$log_dir/$tool.log" python -m pytest -q -p no:cacheprovider "$@" > "$log_dir/$tool.pytest.txt" 2>&1
  pytest_rc=$?
  summary=$(grep -hE "(ERROR|RACECHECK) SUMMARY" "$log_dir/$tool.log" | sed 's/^========= //' | sort | uniq -c | tr -s ' ' | paste -sd ';' -)
  result=$(tail -n 1 "$log_dir/$tool.pytest.txt")
  echo "$tool: ${summary:-no summary} | pytest rc=$pytest_rc: $result"
  if [ "$pytest_rc" -ne 0 ] || grep -hE "(ERROR|RACECHECK) SUMMARY" "$log_dir/$tool.log" |
       grep -qvE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors, 0 warnings\)"; then
    status=1
  fi
done
exit "$status"
