#!/usr/bin/env python3
"""Copies the CUDA attention kernels (src/backend/cuda, with the parameter headers they share with
the CPU kernels, src/backend/sdpa_*.h) into OUT as host C++ for the emulation build (run.sh): the
PTX wrappers (mma.sync, ldmatrix, cp.async) are removed in favour of emu.h's, the dynamic shared
memory becomes the emulator's buffer and each <<<...>>> launch a call of emu_launch_checked, which
checks the kernel's pointers against the emulated device memory first. The kernels themselves are
not touched.

usage: prepare.py ROOT OUT
"""
import os
import re
import sys

root, out = sys.argv[1], sys.argv[2]
src = os.path.join(root, 'src/backend/cuda')
dst = os.path.join(out, 'src/backend/cuda')
os.makedirs(dst, exist_ok=True)
cpu = os.path.join(out, 'src/backend/cpu')  # a link to src/backend/cpu in older versions
if os.path.islink(cpu):
    os.unlink(cpu)


def write(path, text):
    """Writes text to path unless it holds it already (so that make sees unchanged sources)."""
    if os.path.exists(path) and open(path).read() == text:
        return
    open(path, 'w').write(text)


write(os.path.join(dst, 'sdpa_cuda.h'), open(os.path.join(src, 'sdpa_cuda.h')).read())
# The parameter and dropout headers shared with the CPU kernels (src/backend/sdpa_*.h), which the
# kernels include as ../sdpa_*.h: as they are (plain C++, no CUDA include).
for name in sorted(os.listdir(os.path.join(root, 'src/backend'))):
    if name.startswith('sdpa_') and name.endswith('.h'):
        write(os.path.join(out, 'src/backend', name),
              open(os.path.join(root, 'src/backend', name)).read())


def strip_definition(text, head):
    """Removes the declaration or definition starting at `head` (up to its ';' or body)."""
    i = text.index(head)
    depth = 0
    for j in range(i, len(text)):
        c = text[j]
        if c == ';' and depth == 0:
            return text[:i] + text[j + 1:]
        if c == '{':
            depth += 1
        elif c == '}':
            depth -= 1
            if depth == 0:
                return text[:i] + text[j + 1:]
    raise ValueError(head)


s = open(os.path.join(src, 'sdpa_cuda_common.cuh')).read()
for inc in ['#include <cuda_bf16.h>\n', '#include <cuda_fp16.h>\n', '#include <cuda_runtime.h>\n']:
    s = s.replace(inc, '')
s = s.replace('#pragma once\n', '#pragma once\n#include "emu.h"\n', 1)
for head in ['template <typename T>\n__device__ __forceinline__ void mma16816(',
             'template <>\n__device__ __forceinline__ void mma16816<__half>(',
             'template <>\n__device__ __forceinline__ void mma16816<__nv_bfloat16>(',
             '__device__ __forceinline__ uint32_t smem_addr(',
             '__device__ __forceinline__ void ldmatrix_x4(',
             '__device__ __forceinline__ void ldmatrix_x4_trans(',
             '__device__ __forceinline__ void cp_async_16(',
             '__device__ __forceinline__ void cp_async_4(',
             '__device__ __forceinline__ void cp_async_commit(',
             'template <int N>\n__device__ __forceinline__ void cp_async_wait(']:
    s = strip_definition(s, head)
write(os.path.join(dst, 'sdpa_cuda_common.cuh'), s)

for name in ['sdpa_forward.cu', 'sdpa_backward.cu']:
    s = open(os.path.join(src, name)).read()
    s = s.replace('extern __shared__ __align__(16) unsigned char smem_raw[];',
                  'unsigned char* smem_raw = ::emu_smem();')
    launch = r'([\w][\w<>:]*)<<<([^,]+), ([^,]+), ([^,]+), stream>>>\((\w+)\);'

    def emu_launch(m, name=name, text=s):
        where = f'{name}:{text.count(chr(10), 0, m.start()) + 1} {m.group(1)}'
        return (f'emu_launch_checked("{where}", {m.group(1)}, dim3({m.group(2)}), {m.group(3)}, '
                f'{m.group(4)}, {m.group(5)});')

    s, n = re.subn(launch, emu_launch, s)
    if n == 0:
        sys.exit(f'prepare.py: no kernel launch found in {name}')
    write(os.path.join(dst, name.replace('.cu', '.cpp')), s)
