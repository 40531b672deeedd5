#!/usr/bin/env bash
# ThreadSanitizer check of concurrent use (docs/threads.md): builds the library and
# attn_concurrency_tests (tests/cpp/test_concurrency.cpp alone; attn_tests when ATTN_TSAN_FILTER
# asks for other tests) with clang -fsanitize=thread in build-tsan/ and runs the concurrency tests
# (Concurrency.*): attention,
# MultiheadAttention and GPT forward and backward, training steps and the shared default generator
# from several std::threads at once, each kernel on its usual OpenMP threads.
#
# OpenMP is LLVM's libomp (clang's -fopenmp) with LLVM's Archer tool (libarcher.so, loaded through
# OMP_TOOL_LIBRARIES), which tells ThreadSanitizer about OpenMP's barriers and joins; without it
# every parallel region would be reported (libgomp, GCC's runtime, cannot be annotated at all).
# The script checks that Archer is active, so the check never silently degrades. OMP_NUM_THREADS
# defaults to 2 so that parallel regions have several threads even on one core. Code that is not
# instrumented (libomp's and OpenBLAS's internals, the system's GoogleTest) is left out of the
# reports (ignore_noninstrumented_modules), as Archer's documentation prescribes.
#
# Any ThreadSanitizer report fails the script (halt_on_error, and the log is searched too). The
# build is quiet unless it fails. Assumes the packages are installed (scripts/setup.sh --test:
# clang, libclang-rt-14-dev, libomp-dev); it does not call setup.sh.
#
# Environment: ATTN_TSAN_BUILD (build directory, default build-tsan), ATTN_TSAN_JOBS (parallel
# build jobs, default nproc), ATTN_TSAN_FILTER (gtest filter, default Concurrency.*).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ATTN_TSAN_BUILD:-build-tsan}
jobs=${ATTN_TSAN_JOBS:-$(nproc)}
filter=${ATTN_TSAN_FILTER:-Concurrency.*}
target=attn_tests
if [[ "$filter" == "Concurrency.*" ]]; then target=attn_concurrency_tests; fi
bin=$build/$target
flags="-O1 -g1 -fsanitize=thread -fno-omit-frame-pointer"
mkdir -p "$build"
log=$build/tsan-build.log
t0=$SECONDS

# Without MPI: attn_tests never starts it, and OpenMPI's own threads would only add noise. Without
# oneDNN: its libgomp beside clang's libomp (products through OpenBLAS, as in sanitize.sh). The
# build does not run the sanitized binary to list its tests (ctest would, when asked).
if ! {
  CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=None -DATTN_MPI=OFF \
    -DATTN_ONEDNN=OFF -DATTN_CUDA=OFF -DATTN_BUILD_PYTHON=OFF -DATTN_BUILD_BENCH=OFF -DATTN_BUILD_EXAMPLES=OFF \
    -DATTN_INSTALL=OFF \
    -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" &&
    cmake --build "$build" -j"$jobs" --target "$target"
} >"$log" 2>&1; then
  { grep -E -A3 "error:|undefined reference|CMake Error" "$log" || tail -40 "$log"; } | head -120 >&2
  echo "tsan: configuring or building $build failed (the whole log: $log)" >&2
  exit 1
fi
build_s=$((SECONDS - t0))

# grep reads all of ldd's output (no -q): under pipefail, grep -q leaving early could kill ldd with
# SIGPIPE and fail the pipeline although the library is there.
if ! ldd "$bin" | grep 'libomp\.so' >/dev/null; then
  echo "tsan: $bin is not linked with LLVM's libomp:" >&2
  ldd "$bin" | grep -i omp >&2 || true
  exit 1
fi
archer=$(dirname "$(readlink -f "$(command -v clang)")")/../lib/libarcher.so
if [ ! -f "$archer" ]; then
  echo "tsan: LLVM's Archer (libarcher.so) not found at $archer (package libomp-dev)" >&2
  exit 1
fi
# Stack traces with file:line need llvm-symbolizer; Debian's clang-14 installs it versioned only.
symbolizer=""
for s in llvm-symbolizer /usr/lib/llvm-14/bin/llvm-symbolizer /usr/bin/llvm-symbolizer-14; do
  if command -v "$s" >/dev/null 2>&1; then
    symbolizer="external_symbolizer_path=$(command -v "$s")"
    break
  fi
done

run_log=$build/tsan-run.log
status=0
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_TOOL_LIBRARIES="$archer" ARCHER_OPTIONS=verbose=1 \
  TSAN_OPTIONS="halt_on_error=1 exitcode=66 ignore_noninstrumented_modules=1 second_deadlock_stack=1 $symbolizer" \
  "$bin" --gtest_filter="$filter" --gtest_brief=1 >"$run_log" 2>&1 || status=$?
if ! grep -q "Archer detected OpenMP application with TSan" "$run_log"; then
  cat "$run_log" >&2
  echo "tsan: Archer did not start, so OpenMP synchronisation was invisible to TSan" >&2
  exit 1
fi
if [ "$status" -ne 0 ] || grep -q "ThreadSanitizer" "$run_log"; then
  cat "$run_log" >&2
  echo "tsan: $filter failed or ThreadSanitizer reported (exit status $status)" >&2
  exit 1
fi
if ! grep -qE '^\[  PASSED  \] [1-9][0-9]* test' "$run_log"; then
  cat "$run_log" >&2
  echo "tsan: no test matched $filter in $bin" >&2
  exit 1
fi
grep -v "^Archer detected" "$run_log"
echo "tsan: $filter clean under ThreadSanitizer with libomp + Archer," \
  "OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ($((SECONDS - t0))s: build ${build_s}s," \
  "run $((SECONDS - t0 - build_s))s)"
