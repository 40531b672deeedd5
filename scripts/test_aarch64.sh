#!/usr/bin/env bash
# The fused kernels on 64-bit ARM: cross-builds attn_kernel_tests (the kernel and autograd test
# files of attn_tests; attn_tests itself with --all) for AArch64 with Debian's cross toolchain
# against arm64 libraries (multiarch), and runs the kernel and autograd tests under
# qemu-user, so the NEON build of the kernels (src/backend/cpu/simd.h: Neon) and the portable
# scalar build are checked against the reference kernels on every change. The kernel tests run a
# second time on an emulated CPU with 256-bit SVE, where the SVE build (simd.h: Sve) is the one
# chosen (ATTN_CPU_ISA=sve makes FusedIsaChoice check that it is), the parameterised tables a part
# of their cases (below).
#
# Usage: scripts/test_aarch64.sh [--all]
#   --all  every test of attn_tests, not only the kernels and autograd (slower under emulation)
# Environment: ATTN_AARCH64_BUILD (build directory, default build-aarch64), ATTN_AARCH64_JOBS
# (parallel build jobs, default nproc), ATTN_AARCH64_SVE_SHARDS (the SVE run takes one table case
# in this many, default 3).
#
# Installs what is missing (as scripts/setup.sh does): the arm64 architecture in dpkg, the cross
# compiler, qemu-user and the arm64 -dev packages attn links. OpenBLAS is its OpenMP build
# (libopenblas-openmp-dev): the pthread build's own thread pool spins for minutes under
# qemu-user, the OpenMP one runs on attn's OpenMP threads.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ATTN_AARCH64_BUILD:-build-aarch64}
jobs=${ATTN_AARCH64_JOBS:-$(nproc)}
filter='Sdpa*:CausalMask*:Fused*:Autograd*:*SdpaTable*:*FusedVsReference*:*FusedScoreMods*:*SdpaFusedBackwardTable*:*FiniteDifferences*:*SdpaBackwardTensorTable*:TensorMatmul*:TensorSoftmax*:GemmFewRows*:Flex.*:*PagedTable*:Mxfp4.*:Unary.*:Copy.*'
# qemu-user 7.2 (Debian 12) never returns from a guest's first thread creation here (a bare
# std::thread spins for ever), so the emulated tests run on one thread (OMP_NUM_THREADS=1) and
# the tests that start threads themselves are left out; they run natively in the main suite.
no_threads='FusedDeterminism.*:SdpaFusedBackward.OneAndTwoThreadsAreBitwiseIdentical'
no_threads+=':SdpaFusedBackwardMods.OneTwoAndThreeThreadsAreBitwiseIdentical'
no_threads+=':Sdpa.NonContiguousMaskAndThreadCountIndependence'
no_threads+=':AutogradGraphTest.SetGradEnabledAndThreadLocality:Concurrency.*'
no_threads+=':TensorMatmul.OneRowLargeVsNaive:GemmFewRows.SameBitsAtEveryThreadCount'
no_threads+=':Fused.*'  # nn/fused.h's ops against the separate ops, at 1 and 2 threads
no_threads+=':Paged.SameBitsForAnyThreadCount:Flex.CapturedGradientsAreTheSameBitsForAnyThreadCount'
no_threads+=':Mxfp4.RowsAreTheSameBitsForAnyThreadsAndRowCounts:Copy.AnyThreadCount'
target=attn_kernel_tests
if [[ "${1:-}" == "--all" ]]; then
  filter='*'
  target=attn_tests
fi
bin=$build/$target
filter="$filter-$no_threads"

packages=(g++-aarch64-linux-gnu qemu-user libopenblas-openmp-dev:arm64 libcairo2-dev:arm64
          libgtest-dev:arm64 libpcre2-dev:arm64 libicu-dev:arm64 nlohmann-json3-dev)
source scripts/lib/apt.sh
apt_install_missing test_aarch64 "${packages[@]}"

t0=$SECONDS
mkdir -p "$build"
log=$build/build.log
if ! { cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
         -DCMAKE_BUILD_TYPE=Release -DATTN_BUILD_PYTHON=OFF -DATTN_BUILD_EXAMPLES=OFF \
         -DATTN_BUILD_BENCH=OFF -DATTN_INSTALL=OFF -DATTN_MPI=OFF -DATTN_ONEDNN=OFF -DATTN_CUDA=OFF &&
       cmake --build "$build" -j"$jobs" --target "$target"; } >"$log" 2>&1; then
  grep -E -A3 "error:|undefined reference|CMake Error" "$log" | head -80 >&2 || tail -40 "$log" >&2
  echo "test_aarch64: cross build failed (full log: $log)" >&2
  exit 1
fi
built=$((SECONDS - t0))

t1=$SECONDS
out=$build/qemu-tests.log
out_sve=$build/qemu-tests-sve.log
emulate() {  # qemu options, then the binary and its arguments
  qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=/usr/lib/aarch64-linux-gnu/openblas-openmp \
    "$@"
}
run() {  # qemu CPU options, log, gtest filter, extra -E settings
  local cpu=$1 log=$2 tests=$3
  shift 3
  emulate -cpu "$cpu" -E OMP_NUM_THREADS=1 "$@" "$bin" --gtest_filter="$tests" --gtest_brief=1 \
    >"$log" 2>&1
}
# attn_kernel_tests must hold every test that the filter selects from attn_tests: where the native
# suite is built (build/attn_tests, as scripts/test.sh leaves it), compare the two lists.
names() { awk '/^[^ ]/ { s = $1 } /^  / { print s $1 }' | sort; }
if [[ "$target" == attn_kernel_tests && -x build/attn_tests ]]; then
  missing=$(comm -23 <(build/attn_tests --gtest_list_tests --gtest_filter="$filter" | names) \
    <(emulate "$bin" --gtest_list_tests --gtest_filter="$filter" | names))
  if [[ -n "$missing" ]]; then
    echo "test_aarch64: tests selected in build/attn_tests but not in $target (add their file to" \
      "attn_kernel_tests in CMakeLists.txt):" >&2
    echo "$missing" >&2
    exit 1
  fi
fi
# The SVE run: every kernel test, but of the parameterised tables one case in 3 (gtest's sharding:
# the cases i with i % 3 == 0). qemu emulates SVE about ten times slower than NEON (all the cases
# took ~21 minutes on a slow host). What the tables vary (shapes, masks, modifiers, dropout) runs
# the same kernel source at every vector length, and every case runs at SVE-256's 8 lanes natively
# (AVX2) and under NEON above. ATTN_AARCH64_SVE_SHARDS=1 runs them all.
tables='*SdpaTable*:*FusedVsReference*:*FusedScoreMods*:*SdpaFusedBackwardTable*:*PagedTable*:*CacheDtypes*'
sve_shards=${ATTN_AARCH64_SVE_SHARDS:-3}
sve_rest="Sdpa*:Fused*:Flex.*-$no_threads:$tables"
out_tables=$build/qemu-tests-sve-tables.log
sve=(max,sve-default-vector-length=32)
# Two emulated threads side by side (2 cores): the SVE tables; NEON, then the rest of SVE.
set +e
run "${sve[@]}" "$out_tables" "$tables-$no_threads" -E ATTN_CPU_ISA=sve \
  -E GTEST_TOTAL_SHARDS="$sve_shards" -E GTEST_SHARD_INDEX=0 &
tables_pid=$!
run max,sve=off "$out" "$filter"
rc=$?
run "${sve[@]}" "$out_sve" "$sve_rest" -E ATTN_CPU_ISA=sve
rc_sve=$?
wait "$tables_pid"
rc_tables=$?
set -e
ran=$((SECONDS - t1))
if (( rc != 0 )); then
  cat "$out" >&2
  echo "test_aarch64: tests failed under qemu-aarch64 (rc $rc)" >&2
  exit 1
fi
for r in "$rc_sve:$out_sve" "$rc_tables:$out_tables"; do
  if [[ "${r%%:*}" != 0 ]]; then
    cat "${r#*:}" >&2
    echo "test_aarch64: kernel tests failed under qemu-aarch64 with 256-bit SVE (rc ${r%%:*})" >&2
    exit 1
  fi
done
count() { grep -E '^\[  PASSED  \]' "$1" | sed 's/\[  PASSED  \] //; s/\.$//'; }
echo "test_aarch64: $(count "$out") passed under qemu-aarch64 (NEON), $(count "$out_sve") +" \
  "$(count "$out_tables") (tables, 1 in $sve_shards) with 256-bit SVE, one thread (build ${built}s," \
  "tests ${ran}s)"
