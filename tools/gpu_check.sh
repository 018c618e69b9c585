#!/usr/bin/env bash
# The GPU test suite in bounded pieces, for a GPU machine whose commands have a time limit: the
# whole suite in one pytest run takes longer than ten minutes even with 16 workers, and a run cut
# off at its limit reports nothing. Each group runs whole test files (CUDA-only tests often carry
# no "cuda" in their ids, so `-k cuda` would drop them) under its own time limit and prints one
# line: the group, pytest's closing line, its seconds. Builds first unless FP4OPS_SKIP_BUILD=1
# (then an installed fp4ops, or else one built in place under python/).
#
#   tools/gpu_check.sh LOG_DIR [GROUP ...]     default groups: all of them, in the order below
#   FP4OPS_CUDA_ARCHS=9.0 (default here), MAX_JOBS=16, WORKERS=8, GROUP_SECONDS=300,
#   FP4OPS_TESTS_CUDA_ONLY=1 (default here: tests parametrized with device "cpu" are deselected;
#   CI runs them; set 0 to run them too)
#
# Older GPUs' code paths on a newer GPU: FP4OPS_CUDA_ARCHS=8.0+PTX builds an sm_80 cubin, which a
# Hopper cannot run, and sm_80 PTX, which the driver then compiles for it; the script raises the
# driver's JIT cache to 4 GB and fills it once before the groups, so that the workers do not all
# compile at once. (Not CUDA_FORCE_PTX_JIT=1: PyTorch's own kernels ship without PTX and fail.)
#
# Groups: linear gemv producers quantize recipe shared compile huge. Logs: LOG_DIR/build.log and
# one LOG_DIR/tests-<group>.log each (the slowest tests listed at the end of each).
set -u
log_dir=${1:?usage: tools/gpu_check.sh LOG_DIR [GROUP ...]}
shift
[ "$#" -eq 0 ] && set -- linear gemv producers quantize recipe shared compile huge
mkdir -p "$log_dir"
export FP4OPS_CUDA_ARCHS=${FP4OPS_CUDA_ARCHS:-9.0} MAX_JOBS=${MAX_JOBS:-16} PYTHONUNBUFFERED=1
export FP4OPS_TESTS_CUDA_ONLY=${FP4OPS_TESTS_CUDA_ONLY:-1}
cd "$(dirname "$0")/.."
start=$(date +%s)
if [ "${FP4OPS_SKIP_BUILD:-0}" != 1 ]; then
  python3 -m pip install --no-build-isolation --no-deps -e . > "$log_dir/build.log" 2>&1
  echo "build: rc=$? in $(( $(date +%s) - start )) s"
elif ! python3 -c "import fp4ops" 2> /dev/null; then
  # Built in place (setup.py build_ext --inplace) rather than installed: the package is python/.
  export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
  python3 -c "import fp4ops" || { echo "FP4OPS_SKIP_BUILD=1, but fp4ops does not import: build it first"; exit 1; }
fi

files_of() {
  case "$1" in
    linear) echo tests/test_linear.py tests/test_linear_mxfp4_x.py tests/test_linear_mxfp4_prescaling.py tests/test_nn.py ;;
    gemv) echo tests/test_gemv.py ;;
    producers) echo tests/test_producers.py tests/test_w4a4_chain.py ;;
    quantize) echo tests/test_cuda_ops.py tests/test_quantize.py tests/test_cuda_casts.py tests/test_swizzle.py tests/test_tensor_rows.py ;;
    recipe) echo tests/test_recipe.py tests/test_hadamard.py ;;
    shared) echo tests/test_determinism.py tests/test_opcheck.py tests/test_bad_inputs.py tests/test_multi_gpu.py ;;
    compile) echo tests/test_compile.py ;;
    huge) echo tests/test_huge.py ;;
    *) return 1 ;;
  esac
}

case "$FP4OPS_CUDA_ARCHS" in
  *+PTX*)
    export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296}
    began=$(date +%s)
    python3 -c "import torch, fp4ops; fp4ops.quantize_nvfp4(torch.ones(16, device='cuda')); torch.cuda.synchronize()"
    echo "PTX JIT warm-up: rc=$? in $(( $(date +%s) - began )) s" ;;
esac

status=0
for group in "$@"; do
  files=$(files_of "$group") || { echo "$group: unknown group"; status=1; continue; }
  began=$(date +%s)
  # shellcheck disable=SC2086
  timeout "${GROUP_SECONDS:-300}" python3 -m pytest $files -q -p no:cacheprovider -n "${WORKERS:-8}" \
    --durations=10 -rfE > "$log_dir/tests-$group.log" 2>&1
  rc=$?
  summary=$(grep -E "^(=+ )?[0-9]+ (passed|failed)|no tests ran|error" "$log_dir/tests-$group.log" | tail -n 1)
  [ "$rc" -eq 124 ] && summary="cut off at ${GROUP_SECONDS:-300} s"
  echo "$group: rc=$rc ${summary:-see $log_dir/tests-$group.log} ($(( $(date +%s) - began )) s)"
  [ "$rc" -ne 0 ] && status=1
done
exit "$status"
