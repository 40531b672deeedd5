#!/bin/bash
# Runs tests/cuda/test_sdpa_cuda.cpp (attn_cuda_tests) on the CPU, the CUDA attention kernels
# compiled as host C++ against an emulation of the device features they use (emu.h: one OS thread
# per GPU thread, warp collectives through barriers, the PTX ISA's fragment layouts). It checks
# the kernels' indexing, tiling, masking, dropout and pipelines without a GPU; it does not check
# races between cp.async and shared-memory reads, bank conflicts, register use or speed, nor the
# fragment layouts themselves beyond emu.h's reading of the ISA. The CPU reference comes from
# build/libattn.a, so build that first.
#
#   tests/cuda/emulate/run.sh                  # every test (about 20 minutes on 2 cores)
#   tests/cuda/emulate/run.sh '*Forward/Lq17*' # a gtest filter
#
# Environment: BUILD (default build), CUDA_HOME (default /usr/local/cuda; only its headers are
# used: cuda_runtime_api.h for the runtime's types).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=${BUILD:-$root/build}
cuda=${CUDA_HOME:-/usr/local/cuda}
out=$build/cuda_emulation
if [ ! -f "$build/libattn.a" ]; then
  echo "run.sh: $build/libattn.a not found: cmake --build build --target attn first" >&2
  exit 1
fi
mkdir -p "$out"
python3 "$here/prepare.py" "$root" "$out"
flags=(-std=c++20 -O2 -pthread -w -I"$cuda/include" -I"$root/include" -I"$here")
g++ "${flags[@]}" -c "$out/src/kernels/cuda/sdpa_forward.cpp" -o "$out/forward.o" &
g++ "${flags[@]}" -c "$out/src/kernels/cuda/sdpa_backward.cpp" -o "$out/backward.o" &
wait
g++ "${flags[@]}" -c "$root/tests/cuda/test_sdpa_cuda.cpp" -o "$out/test.o" &
g++ "${flags[@]}" -c "$here/runtime.cpp" -o "$out/runtime.o" &
wait
g++ -pthread -fopenmp "$out/test.o" "$out/forward.o" "$out/backward.o" "$out/runtime.o" \
  "$build/libattn.a" -lgtest -lgtest_main $(pkg-config --libs openblas) -o "$out/attn_cuda_tests_emulated"
"$out/attn_cuda_tests_emulated" --gtest_filter="${1:-*}"
