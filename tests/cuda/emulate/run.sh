#!/bin/bash
# Runs attn_cuda_tests (every tests/cuda/*.cpp: the kernels against the CPU reference, tensors on
# a GPU, the Tensor-level attention dispatch) on the CPU. The CUDA attention kernels are compiled
# as host C++ against an emulation of the device features they use (emu.h: one OS thread per GPU
# thread, warp collectives through barriers, the PTX ISA's fragment layouts), and cudart is
# emulated on host memory (runtime.cpp: one 64 GiB GPU, device allocations registered so that
# copies, memsets and kernel arguments are checked against them). Everything else is the real
# build/libattn.a: src/device/cuda_runtime.cpp (caching allocator, copies, DeviceGuard),
# src/tensor, src/ops/attention_cuda.cpp.
#
# It checks the kernels' indexing, tiling, masking, dropout and pipelines, and the host side's
# pointers, strides and copies, without a GPU. It does not check races between cp.async and
# shared-memory reads, bank conflicts, register use or speed, nor the fragment layouts themselves
# beyond emu.h's reading of the ISA. Too slow for ctest or CI (about 20 minutes on 2 cores for
# everything): run it by hand, or a subset with a gtest filter.
#
#   # from a fresh checkout: configure and build libattn.a (with CUDA: nvcc must be found)
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 --target attn
#   tests/cuda/emulate/run.sh                         # every test
#   tests/cuda/emulate/run.sh 'CudaDevice*:CudaAttention*'  # a gtest filter (seconds to minutes)
#   tests/cuda/emulate/run.sh '*Forward/Lq17*'        # one kernel case
#   tests/cuda/emulate/run.sh --list                  # the tests, nothing run
#
# The build is incremental (a Makefile in build/cuda_emulation, with header dependencies): only
# what changed is recompiled. Environment: BUILD (default build), CUDA_HOME (default
# /usr/local/cuda; only its headers are used, nothing links cudart), JOBS (default 2),
# ATTN_EMU_DEVICES (emulated GPUs, default 1), ATTN_EMU_SMEM_OPTIN (opt-in shared memory per block
# in bytes, default 232448 as on an H100).
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
  echo "run.sh: $build/libattn.a was built without CUDA (src/device/cuda_runtime.cpp); configure" \
    "with nvcc available (CMake ATTN_CUDA=ON)" >&2
  exit 1
fi

# The libraries libattn.a needs, from CMake's link line of attn_cuda_tests, less CUDA's own
# (cudart, cuBLAS, ...): this runtime and these kernels stand in for them.
link_txt=$build/CMakeFiles/attn_cuda_tests.dir/link.txt
if [ -f "$link_txt" ]; then
  libs=$(tr ' ' '\n' <"$link_txt" | sed -n '/^attn_cuda_tests$/,$p' | tail -n +2 |
    grep -v -e '^$' -e 'libattn\.a$' -e '^-L' -e 'cuda' -e 'cublas' -e 'culibos' | tr '\n' ' ')
else
  libs="-lgtest -lgtest_main -fopenmp $(pkg-config --libs openblas) -ldl -lpthread"
fi

mkdir -p "$out"
python3 "$here/prepare.py" "$root" "$out"
tests=$(cd "$root/tests/cuda" && ls ./*.cpp | sed 's|^\./||; s|\.cpp$||')
objs="kernel_forward.o kernel_backward.o runtime.o"
for t in $tests; do objs="$objs $t.o"; done

cc=g++
command -v ccache >/dev/null && cc="ccache g++"
cat >"$out/Makefile.new" <<EOF
# Written by tests/cuda/emulate/run.sh: do not edit.
CXX := $cc
COMMON := -std=c++20 -O2 -pthread -MMD -MP -isystem $cuda/include -I$root/include
# The kernels and emu.h as host C++: warnings are the emulation's noise. A misaligned access (a
# fault on a GPU, harmless on x86) stops the run with UBSan's message naming the line.
KERNEL := \$(COMMON) -w -I$here -I$out/src/kernels/cuda -fsanitize=alignment \\
  -fno-sanitize-recover=alignment
TEST := \$(COMMON) -Wall -Wextra -fopenmp -I$root/src -DGTEST_HAS_PTHREAD=1

attn_cuda_tests_emulated: $objs $build/libattn.a
	@# The emulated kernels come before libattn.a, so that its nvcc objects (sdpa_*.cu.o, with
	@# their fatbinary registration and cudart launches) are never pulled; there is no -lcudart.
	\$(CXX) -pthread -fopenmp -fsanitize=alignment -Wl,-Map=link.map $objs $build/libattn.a $libs -o \$@
	@if grep -q -e '(sdpa_[a-z_]*\.cu\.o)' -e 'libcudart' link.map; then \\
	  echo "run.sh: the link pulled CUDA objects:"; grep -e '(sdpa_[a-z_]*\.cu\.o)' -e 'libcudart' link.map; \\
	  rm -f \$@; exit 1; fi

kernel_forward.o: $out/src/kernels/cuda/sdpa_forward.cpp
	\$(CXX) \$(KERNEL) -c \$< -o \$@
kernel_backward.o: $out/src/kernels/cuda/sdpa_backward.cpp
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
