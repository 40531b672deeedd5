#!/usr/bin/env bash
# Installs the Debian packages attn needs (only those missing; quiet when all are present) and
# builds everything into build/.  Usage: scripts/setup.sh [--test]
#   --test  also installs what the test suite needs (GoogleTest, pytest, and python3-torch, the
#           oracle the Python tests compare against; attn itself never imports torch), and the
#           git-ignored virtual environment .venv-test: Debian's Python with its packages (torch,
#           numpy, pytest) plus transformers from PyPI, the reference of the Hugging Face
#           interop tests (tests/python/test_hf_gpt2.py, which skip without it).
set -euo pipefail
cd "$(dirname "$0")/.."

# fortunes: the default training corpus of `attn train` (/usr/share/games/fortunes/songs-poems).
# libopenmpi-dev, openmpi-bin: attn::distributed and `mpirun -np N attn train` (Debian's OpenMPI).
# libcairo2-dev, fonts-dejavu-core: attn::plot draws with cairo (PNG, SVG, PDF) in DejaVu Sans,
# which cairo finds through fontconfig.
# libpcre2-dev: GPT-2's byte-level BPE splits words with PCRE2's Unicode properties.
# libicu-dev: tokenizer.json's Unicode normalizers (NFC, NFKC, ...).
# libdnnl-dev: matrix products through oneDNN's sgemm (faster than OpenBLAS's here; see
# src/backend/cpu/gemm.h); OpenBLAS stays for matrix-vector products and where oneDNN is absent.
# ocl-icd-opencl-dev: Debian's oneDNN is built with its OpenCL runtime, and its CMake config
# (find_package(dnnl)) fails without the OpenCL headers and library, which it only recommends.
packages=(cmake g++ make pkg-config libopenblas-dev pybind11-dev python3-dev python3-numpy
          libgtest-dev libbenchmark-dev libcairo2-dev fonts-dejavu-core nlohmann-json3-dev
          fortunes libopenmpi-dev openmpi-bin libpcre2-dev libicu-dev libdnnl-dev ocl-icd-opencl-dev)
if [[ "${1:-}" == "--test" ]]; then
  # clang with its sanitizer and libFuzzer runtimes (libclang-rt) and OpenMP (libomp):
  # scripts/sanitize.sh's ASan + UBSan build and the fuzz targets.
  # python3-venv: .venv-test below. python3-jinja2: the oracle of the chat templates' tests.
  packages+=(python3-pytest python3-pytest-xdist python3-torch python3-jinja2 clang libclang-rt-14-dev libomp-dev
             python3-venv)
fi

source scripts/lib/apt.sh
apt_install_missing setup "${packages[@]}"

# transformers is on PyPI only; these versions work with Debian's torch 1.13 and bring tokenizers
# and safetensors. Without a network the tests that need it skip (with a warning here).
if [[ "${1:-}" == "--test" ]] &&
   ! .venv-test/bin/python -c "import transformers, tokenizers, safetensors" 2>/dev/null; then
  echo "setup: creating .venv-test (transformers from PyPI over Debian's torch)"
  if ! { /usr/bin/python3 -m venv --system-site-packages .venv-test &&
         .venv-test/bin/pip install -q --disable-pip-version-check \
           "transformers>=4.40,<4.45"; }; then
    echo "setup: warning: could not install transformers into .venv-test; the Hugging Face" \
         "interop tests will skip" >&2
  fi
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=/usr/bin/python3 >/dev/null
# Quiet on success; on failure the compiler's diagnostics are shown.
if ! cmake --build build -j"$(nproc)" > build/build.log 2>&1; then
  grep -v -E "^\[ *[0-9]+%\]|lto-wrapper" build/build.log >&2
  echo "setup: build failed (full log: build/build.log)" >&2
  exit 1
fi
