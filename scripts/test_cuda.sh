#!/usr/bin/env bash
# The GPU test suite (tests/cuda, ctest label cuda) on a machine with an NVIDIA GPU.
#
#   scripts/test_cuda.sh pack   builds build-cuda/attn_cuda_tests and bench_cuda (attn's side of
#                               bench/compare_cuda.py) here (CUDA toolkit, no GPU needed) and
#                               gathers them with the shared libraries they load that a GPU machine
#                               may lack into .cuda-bundle/ (git-ignored, a few MB)
#   scripts/test_cuda.sh run    on the GPU machine: runs .cuda-bundle's tests, then
#                               compute-sanitizer's memcheck and racecheck on the kernel test table
#   scripts/test_cuda.sh        both, where one machine has the toolkit, the libraries and a GPU
#
# The lent machines of this project have the CUDA toolkit and a driver but not attn's Debian
# libraries, so the bundle travels: the device tool's `run` with carry [".cuda-bundle"] and the
# command `bash scripts/test_cuda.sh run`. Logs go to $OUT when it is set (what comes back).
# Environment: ATTN_CUDA_SANITIZE_FILTER (gtest filter for the sanitizer runs, default the
# attention kernel tables), ATTN_CUDA_SANITIZE=0 skips the sanitizer runs.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-all}"
build=build-cuda
bundle=.cuda-bundle

pack() {
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DATTN_CUDA=ON -DATTN_BUILD_PYTHON=OFF \
    -DATTN_BUILD_EXAMPLES=OFF -DATTN_BUILD_BENCH=ON -DATTN_MPI=OFF -DATTN_ONEDNN=OFF \
    -DATTN_INSTALL=OFF >/dev/null
  cmake --build "$build" -j"$(nproc)" --target attn_cuda_tests bench_cuda
  rm -rf "$bundle"
  mkdir -p "$bundle/lib"
  cp "$build/attn_cuda_tests" "$build/bench/bench_cuda" "$bundle/"
  # Everything the binaries load except the C library's own parts and the driver (which must be
  # the machine's). cuBLAS is the machine's too (its toolkit's, hundreds of MB).
  ldd "$build/attn_cuda_tests" "$build/bench/bench_cuda" | awk '/=> \// {print $3}' | sort -u |
    while read -r lib; do
      case "$(basename "$lib")" in
        libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libcuda.so* | \
          libcublas*) ;;
        *) cp -L "$lib" "$bundle/lib/" ;;
      esac
    done
  echo "test_cuda: $(du -sh "$bundle" | cut -f1) in $bundle ($(ls "$bundle/lib" | wc -l) libraries)"
}

run() {
  if [[ ! -x "$bundle/attn_cuda_tests" ]]; then
    echo "test_cuda: $bundle/attn_cuda_tests is missing: run 'scripts/test_cuda.sh pack' first" >&2
    exit 2
  fi
  local cuda_lib
  for cuda_lib in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
    [[ -d "$cuda_lib" ]] && break
  done
  export LD_LIBRARY_PATH="$PWD/$bundle/lib:$cuda_lib:${LD_LIBRARY_PATH:-}"
  local log="${OUT:-/tmp}"
  nvidia-smi -L || true
  local rc=0
  # Tests first, each bounded: a hung kernel fails the run instead of holding the machine.
  timeout 900 "$bundle/attn_cuda_tests" 2>&1 | tee "$log/cuda_tests.log" || rc=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) \]" "$log/cuda_tests.log" | head -40 || true
  if [[ "${ATTN_CUDA_SANITIZE:-1}" != 0 ]] && command -v compute-sanitizer >/dev/null; then
    local filter="${ATTN_CUDA_SANITIZE_FILTER:-CudaSdpa*}"
    for tool in memcheck racecheck; do
      echo "test_cuda: compute-sanitizer --tool $tool on $filter"
      if ! timeout 1200 compute-sanitizer --tool "$tool" --error-exitcode 99 \
          "$bundle/attn_cuda_tests" --gtest_filter="$filter" --gtest_brief=1 \
          > "$log/sanitize_$tool.log" 2>&1; then
        rc=1
        echo "test_cuda: $tool FAILED (see sanitize_$tool.log)"
      fi
      tail -5 "$log/sanitize_$tool.log"
    done
  fi
  return $rc
}

case "$mode" in
  pack) pack ;;
  run) run ;;
  all) pack && run ;;
  *) echo "usage: scripts/test_cuda.sh [pack|run]" >&2; exit 2 ;;
esac
