#!/usr/bin/env bash
# Creates (or checks) the git-ignored virtual environment .venv-bench that holds the speed anchor
# of the benchmarks: today's PyTorch from PyPI (torch 2.15), beside Debian's Python and numpy so
# that attn's module (built for /usr/bin/python3) imports in the same process.
# Idempotent and quiet when everything is present; the benchmarks call it themselves.
# The test suite does not need it: its correctness oracle stays Debian's torch 1.13.
# transformers too, for bench/decoder_compare.py.
# It also installs the GEMM libraries that build/bench/bench_gemm times beside OpenBLAS (BLIS,
# oneDNN, libxsmm; re-run cmake afterwards so that the bench finds them).
#   scripts/bench_setup.sh          prints nothing when ready, installs otherwise
#   scripts/bench_setup.sh --print  prints the venv's python path when ready (for other scripts)
#   scripts/bench_setup.sh --llama-cpp   also llama.cpp (PyPI's llama-cpp-python, compiled here for
#                                   this CPU: several minutes on 2 cores) and gguf, the anchor of
#                                   bench/decoder_compare.py; not needed by the tests
# PyPI's Linux wheel of torch is the CUDA build (it brings NVIDIA's libraries, ~3 GB); it runs on
# the CPU as the CPU wheel would: the CPU kernels are the same code.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_SPEC=${ATTN_BENCH_TORCH:-"torch==2.15.*"}
venv=.venv-bench
py=$venv/bin/python

ready() {
  [[ -x $py ]] && $py - "$TORCH_SPEC" <<'EOF' 2>/dev/null
import sys, torch, numpy
want = sys.argv[1].split("==")[1].rstrip(".*")
sys.exit(0 if torch.__version__.startswith(want) else 1)
EOF
}

source scripts/lib/apt.sh
apt_install_missing bench_setup libblis-dev libdnnl-dev ocl-icd-opencl-dev libxsmm-dev >&2  # stdout is --print's

if ! ready; then
  # python3-venv: the venv itself; g++ is already a build dependency (torch.compile's C++ backend
  # needs it); numpy comes from Debian (attn's module was built against it).
  apt_install_missing bench_setup python3-venv python3-numpy python3-dev g++
  if [[ ! -x $py ]]; then
    echo "bench_setup: creating $venv ($TORCH_SPEC from PyPI)" >&2
    /usr/bin/python3 -m venv --system-site-packages "$venv"
  fi
  echo "bench_setup: installing $TORCH_SPEC into $venv (a few GB the first time)" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check "$TORCH_SPEC" >&2
  if ! ready; then
    echo "bench_setup: $TORCH_SPEC does not import from $venv" >&2
    exit 1
  fi
fi
# transformers (and safetensors): the anchor of bench/decoder_compare.py (Llama on PyTorch).
if ! $py -c "import transformers, safetensors" 2>/dev/null; then
  echo "bench_setup: installing transformers into $venv" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check transformers safetensors >&2
fi
# llama.cpp, on request: built from source with -march=native (GGML_NATIVE) so that it uses the
# instructions this CPU has (AVX512-BF16 for bfloat16 where present), as a llama.cpp user builds it.
if [[ "${1:-}" == "--llama-cpp" ]] && ! $py -c "import llama_cpp, gguf" 2>/dev/null; then
  apt_install_missing bench_setup cmake g++
  echo "bench_setup: building llama-cpp-python into $venv (compiles llama.cpp: several minutes)" >&2
  CMAKE_ARGS="-DGGML_NATIVE=ON" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$venv/bin/pip" install -q --disable-pip-version-check llama-cpp-python gguf >&2
fi
if [[ "${1:-}" == "--print" ]]; then
  echo "$PWD/$py"
fi
