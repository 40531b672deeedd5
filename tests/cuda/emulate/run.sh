#!/bin/bash
# Runs attn_cuda_tests (every tests/cuda/*.cpp: the kernels against the CPU reference, tensors on
# a GPU, the Tensor-level attention dispatch) on the CPU. The CUDA attention kernels are compiled
# as host C++ against an emulation of the device features they use (emu.h: one OS thread per GPU
# thread, warp collectives through barriers, the PTX ISA's fragment layouts), and cudart is
# emulated on host memory (runtime.cpp: one 64 GiB GPU, device allocations registered so that
# copies, memsets and kernel arguments are checked against them). Everything else is the real
# build/libattn.a: src/backend/cuda/cuda_runtime.cpp (caching allocator, copies, DeviceGuard),
# src/tensor, src/backend/cuda/attention.cpp.
#
# It checks the kernels' indexing, tiling, masking, dropout and pipelines, and the host side's
# pointers, strides, copies and launches, without a GPU; what a GPU would fault on (a kernel
# argument outside device memory, misaligned cp.async/ldmatrix/vector accesses, shared memory out
# of bounds, a launch configuration it refuses) fails the call as on a GPU (see emu.h). It does not
# check bank conflicts, register use or speed, races beyond the two cp.async timings
# (ATTN_EMU_CP_ASYNC=late for the second), nor the fragment layouts themselves beyond emu.h's
# reading of the ISA. Too slow for ctest or CI (about 20 minutes on 2 cores for everything): run
# it by hand, or a subset with a gtest filter.
#
#   # from a fresh checkout: configure (nvcc must be found) and build libattn.a
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 --target attn
#   tests/cuda/emulate/run.sh                        # every test (about 20 minutes)
#   tests/cuda/emulate/run.sh 'CudaDevice*:*CudaAttention*'  # tensors and dispatch (~1 minute)
#   tests/cuda/emulate/run.sh '*Forward/Lq17*'       # one kernel case (seconds)
#   tests/cuda/emulate/run.sh '*Backward/all_features*' --gtest_repeat=3  # more gtest flags
#   tests/cuda/emulate/run.sh --list                 # the tests, nothing run
#   ATTN_EMU_DEVICES=2 tests/cuda/emulate/run.sh 'CudaDevice*'      # two GPUs
#   ATTN_EMU_CP_ASYNC=late tests/cuda/emulate/run.sh '*all_features*'
#
# The build is incremental (a Makefile in build/cuda_emulation, with header dependencies): only
# what changed is recompiled (after a change to src/, rebuild libattn.a first). Environment: BUILD
# (default build), CUDA_HOME (default /usr/local/cuda; only its headers are used, nothing links
# cudart), JOBS (default 2), ATTN_EMU_DEVICES (emulated GPUs, default 1), ATTN_EMU_SMEM_OPTIN
# (opt-in shared memory per block in bytes, default 232448 as on an H100; 101376 for sm_86/89),
# ATTN_EMU_CP_ASYNC (early, the default, or late).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=$(cd "${BUILD:-$root/build}" && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
out=$build/cuda_emulation
if [ ! -f "$build/libattn.a" ]; then
  echo "run.sh: $build/libattn.a not found: cmake --build build --target attn first" >&2
  exit 1
fi
members=$(ar t "$build/libattn.a")
if [[ "$members" != *cuda_runtime.cpp.o* ]]; then
  echo "run.sh: $build/libattn.a was built without CUDA (src/backend/cuda/cuda_runtime.cpp); configure" \
    "with nvcc available (CMake ATTN_CUDA=ON)" >&2
  exit 1
fi

# The libraries libattn.a needs, from CMake's link line of attn_cuda_tests, less CUDA's own
# (cudart, cuBLAS, ...): this runtime and these kernels stand in for them.
link_txt=$build/CMakeFiles/attn_cuda_tests.dir/link.txt
if [ -f "$link_txt" ]; then
  libs=$(tr ' ' '\n' <"$link_txt" | sed -n '/^attn_cuda_tests$/,$p' | tail -n +2 |
    grep -v -e '^$' -e 'libattn\.a$' -e '^-L' -e 'cuda' -e 'cublas' -e 'culibos' | tr '\n' ' ')
else  # another generator than Makefiles: the installed package's own list (build/cmake/attn.pc)
  libs="-lgtest -lgtest_main $(PKG_CONFIG_PATH=$build/cmake pkg-config --static --libs attn |
    tr ' ' '\n' | grep -v -e '^$' -e '^-lattn$' -e '^-L' -e 'cuda' -e 'cublas' | tr '\n' ' ')"
fi

mkdir -p "$out"
python3 "$here/prepare.py" "$root" "$out"
tests=$(cd "$root/tests/cuda" && ls ./*.cpp | sed 's|^\./||; s|\.cpp$||')
objs="kernel_forward.o kernel_backward.o runtime.o"
for t in $tests; do objs="$objs $t.o"; done
for o in "$out"/test_*.o; do  # objects of test files since removed
  if [ -e "$o" ] && [ ! -e "$root/tests/cuda/$(basename "$o" .o).cpp" ]; then rm -f "$o" "${o%.o}.d"; fi
done

cc=g++
command -v ccache >/dev/null && cc="ccache g++"
cat >"$out/Makefile.new" <<EOF
# Written by tests/cuda/emulate/run.sh: do not edit.
CXX := $cc
COMMON := -std=c++20 -O2 -pthread -MMD -MP -isystem $cuda/include -I$root/include
# The kernels and emu.h as host C++: warnings are the emulation's noise. A misaligned access (a
# fault on a GPU, harmless on x86) stops the run with UBSan's message naming the line.
KERNEL := \$(COMMON) -w -I$here -I$out/src/backend/cuda -fsanitize=alignment \\
  -fno-sanitize-recover=alignment
TEST := \$(COMMON) -Wall -Wextra -fopenmp -I$root/src -DGTEST_HAS_PTHREAD=1

attn_cuda_tests_emulated: $objs $build/libattn.a
	@# The emulated kernels come before libattn.a, so that its nvcc objects (sdpa_*.cu.o, with
	@# their fatbinary registration and cudart launches) are never pulled; there is no -lcudart.
	\$(CXX) -pthread -fopenmp -fsanitize=alignment -Wl,-Map=link.map $objs $build/libattn.a $libs -o \$@
	@if grep -q -e '(sdpa_[a-z_]*\.cu\.o)' -e 'libcudart' link.map; then \\
	  echo "run.sh: the link pulled CUDA objects:"; grep -e '(sdpa_[a-z_]*\.cu\.o)' -e 'libcudart' link.map; \\
	  rm -f \$@; exit 1; fi

kernel_forward.o: $out/src/backend/cuda/sdpa_forward.cpp
	\$(CXX) \$(KERNEL) -c \$< -o \$@
kernel_backward.o: $out/src/backend/cuda/sdpa_backward.cpp
	\$(CXX) \$(KERNEL) -c \$< -o \$@
runtime.o: $here/runtime.cpp
	\$(CXX) \$(COMMON) -Wall -Wextra -c \$< -o \$@
%.o: $root/tests/cuda/%.cpp
	\$(CXX) \$(TEST) -c \$< -o \$@

# Everything is rebuilt when this file changes (new flags).
$objs: Makefile

-include \$(wildcard *.d)
EOF
if cmp -s "$out/Makefile.new" "$out/Makefile"; then rm "$out/Makefile.new"; else mv "$out/Makefile.new" "$out/Makefile"; fi
make -s -C "$out" -j"${JOBS:-2}" attn_cuda_tests_emulated
if [ "${1:-}" = "--list" ]; then
  exec "$out/attn_cuda_tests_emulated" --gtest_list_tests
fi
exec "$out/attn_cuda_tests_emulated" --gtest_filter="${1:-*}" "${@:2}"
