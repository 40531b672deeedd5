#!/usr/bin/env bash
# The hardening checks (issue 5), in one clang build with AddressSanitizer + UndefinedBehaviorSanitizer
# in build-san/ (libFuzzer targets included):
#   1. the whole GoogleTest suite (build-san/attn_tests), and the distributed tests as one rank
#      (build-san/attn_dist_tests without mpirun: the communicator, gradient buckets, ZeRO-1 and
#      ring attention code paths in a world of one; OpenMPI's own allocations would drown
#      LeakSanitizer under mpirun)
#   2. `attn walkthrough`, and `attn walkthrough --plots DIR` into a temporary directory
#   3. `ctest -L fuzz`: every fuzz target for ATTN_FUZZ_SECONDS (default 10) from its seed corpus
#      fuzz/corpus/<target>/, and every saved crash input in fuzz/regressions/<target>/ once
# Any sanitizer report (ASan, LeakSanitizer, UBSan) or fuzzer finding fails the script. The build
# is quiet unless it fails. Assumes the packages are installed (scripts/setup.sh: clang,
# libclang-rt-14-dev, libomp-dev, besides the usual ones); it does not call setup.sh.
#
# Environment: ATTN_SAN_BUILD (build directory, default build-san), ATTN_SAN_JOBS (parallel
# build and ctest jobs, default nproc), ATTN_FUZZ_SECONDS (per fuzz target, default 10).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ATTN_SAN_BUILD:-build-san}
jobs=${ATTN_SAN_JOBS:-$(nproc)}
fuzz_seconds=${ATTN_FUZZ_SECONDS:-10}
flags="-O1 -g1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
mkdir -p "$build"
log=$build/sanitize-build.log

t0=$SECONDS
source scripts/lib/phases.sh
# Shows what went wrong in the build log (compiler and linker diagnostics first) and exits.
build_failed() {
  echo "sanitize: $1 failed; diagnostics from $log:" >&2
  grep -E -A3 "error:|warning:|undefined reference|CMake Error" "$log" | head -120 >&2 || true
  echo "---- last lines of $log ----" >&2
  tail -40 "$log" >&2
  exit 1
}

# The fused kernels (sdpa_fused.cpp, sdpa_fused_backward.cpp, sdpa_paged.cpp) are built without
# UBSan's pointer-overflow check: with it and ASan together, clang 14 takes 2-4x as long on them
# (241 s against 59 s for sdpa_fused_backward.cpp at -O1, 74 s against 35 s for sdpa_paged.cpp).
# ASan still checks their every load and store, and the rest of the code (the file parsers
# included, where `p + n` bounds checks live) keeps the check.
# The test files themselves (not the library) are built at -O0: clang then compiles them in less
# than half the time (173 CPU s against 358 for all of them; 6.6 s against 15.2 s for
# test_autograd.cpp), but their own loops run slower: attn_tests took 115-129 s here against 68 s
# at -O1, so on two cores the two about cancel out.
# oneDNN off: Debian's libdnnl links libgomp, clang's -fopenmp uses libomp, and one process
# would hold both runtimes; the products then go through OpenBLAS's sgemm.
if ! CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=None -DATTN_ONEDNN=OFF -DATTN_CUDA=OFF \
  -DATTN_BUILD_PYTHON=OFF -DATTN_BUILD_BENCH=OFF -DATTN_BUILD_EXAMPLES=OFF -DATTN_INSTALL=OFF \
  -DATTN_BUILD_FUZZ=ON -DATTN_FUZZ_SECONDS="$fuzz_seconds" \
  -DATTN_FUSED_KERNEL_FLAGS=-fno-sanitize=pointer-overflow \
  -DATTN_TEST_COMPILE_FLAGS=-O0 \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  >"$log" 2>&1; then
  build_failed "configuring $build"
fi
if ! cmake --build "$build" -j"$jobs" --target attn_tests attn_dist_tests attn_cli attn_fuzz_targets >>"$log" 2>&1; then
  build_failed "building $build"
fi
phase_done build

# Every report aborts (non-zero exit); leaks are checked at exit. scripts/lsan.supp suppresses only
# fontconfig's font patterns, which LeakSanitizer cannot see are still reachable (see there).
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Stack traces with file:line need llvm-symbolizer; Debian's clang-14 installs it versioned only.
if ! command -v llvm-symbolizer >/dev/null 2>&1; then
  for s in /usr/lib/llvm-14/bin/llvm-symbolizer /usr/bin/llvm-symbolizer-14; do
    if [ -x "$s" ]; then
      export ASAN_SYMBOLIZER_PATH=$s
      break
    fi
  done
fi

# attn_tests in 4 x $jobs shards, $jobs at a time (most tests run on one thread; ctest -j runs them
# in parallel in the main build too; more shards than jobs even out the few long tests). Each
# shard's output is kept and shown if it fails.
shards=$((4 * jobs))
run_shard() {
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$1 "$build"/attn_tests --gtest_brief=1 \
    >"$build/attn_tests.shard$1.log" 2>&1
}
failed=0
running=0
for ((shard = 0; shard < shards; shard++)); do
  run_shard "$shard" &
  if (( ++running >= jobs )); then
    wait -n || failed=1
    running=$((running - 1))
  fi
done
while (( running > 0 )); do
  wait -n || failed=1
  running=$((running - 1))
done
if (( failed )); then
  for ((shard = 0; shard < shards; shard++)); do
    if ! grep -q '^\[  PASSED  \]' "$build/attn_tests.shard$shard.log" ||
       grep -q '^\[  FAILED  \]' "$build/attn_tests.shard$shard.log"; then
      cat "$build/attn_tests.shard$shard.log" >&2
      echo "sanitize: attn_tests shard $shard of $shards failed under ASan + UBSan" >&2
    fi
  done
  exit 1
fi
(unset OMPI_COMM_WORLD_SIZE PMI_SIZE PMIX_RANK; "$build"/attn_dist_tests --gtest_brief=1)
phase_done attn_tests

plots=$(mktemp -d)
trap 'rm -rf "$plots"' EXIT
"$build"/attn walkthrough >/dev/null
"$build"/attn walkthrough --plots "$plots" >/dev/null
n_png=$(find "$plots" -name '*.png' | wc -l)
if [ "$n_png" -eq 0 ]; then
  echo "sanitize: walkthrough --plots wrote no PNG into $plots" >&2
  exit 1
fi
phase_done walkthrough

(cd "$build" && ctest -L fuzz -j"$jobs" --output-on-failure)
phase_done fuzz

echo "sanitize: attn_tests, walkthrough (+ $n_png plots) and fuzz targets clean under ASan + UBSan" \
  "($((SECONDS - t0))s: ${timings[*]})"
