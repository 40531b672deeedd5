#!/usr/bin/env bash
# The whole test suite: install what is missing, build, check the layering of the library's
# includes (scripts/check_layers.py), run the C++ tests (ctest), the Python tests (pytest against
# python3-torch; those that need torch 2.x against PyPI's too), both again (less what no
# instruction set reaches) with the instruction sets capped at AVX2 on a CPU with AVX-512,
# scripts/faults.sh (faults produced on purpose against
# `attn train`: kill -9, a second run on one --out, a full disk, NaN/inf, out of memory; see
# docs/reliability.md), then scripts/sanitize.sh: the C++ tests and the walkthrough again under
# AddressSanitizer + UndefinedBehaviorSanitizer, and every libFuzzer target for a bounded time
# over its seed corpus and its regression inputs; scripts/tsan.sh: concurrent use from several
# threads under ThreadSanitizer; and scripts/test_aarch64.sh: the kernel and autograd tests
# cross-built for AArch64 (NEON) and run under qemu-user.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's wall time, printed at the end (and where a phase fails, the ones before it).
source scripts/lib/phases.sh
print_timings() {
  local IFS=,
  echo "test: ${#timings[@]} phases in $((SECONDS))s: ${timings[*]}"
}
trap print_timings EXIT
bash scripts/setup.sh --test
phase_done "set-up and build"
# The layering of the library on its #include lines (scripts/check_layers.py; the link of each layer
# alone is checked by ctest, tests/layers).
/usr/bin/python3 scripts/check_layers.py
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 600)
phase_done ctest
# The Python suite in $(nproc) pytest-xdist workers: most tests run on one thread.
pytest_jobs=(-n "$(nproc)")
PYTHONPATH="$PWD/build/python" /usr/bin/python3 -m pytest -q -p no:cacheprovider "${pytest_jobs[@]}" \
  tests/python
phase_done pytest
# torch 2.x from PyPI (the benchmarks' environment .venv-bench, scripts/bench_setup.sh: torch, its
# NVIDIA libraries and transformers, ~4 GB the first time) is the oracle where torch 1.13 lacks
# what is tested: bfloat16 / float16 CPU kernels, autocast and flex_attention. Without a network
# those comparisons skip, with a warning.
if torch2=$(bash scripts/bench_setup.sh --print); then
  PYTHONPATH="$PWD/build/python" "$torch2" -m pytest -q -p no:cacheprovider \
    tests/python/test_half_dtypes.py tests/python/test_flex_vs_torch2.py \
    tests/python/test_decoder_vs_transformers5.py tests/python/test_autograd_api_vs_torch.py \
    tests/python/test_programs.py::test_llama_style_decoder_under_autocast_then_in_bfloat16
else
  echo "test: warning: no torch 2.x environment (scripts/bench_setup.sh failed); the comparisons" \
       "with torch 2.x (test_half_dtypes.py, test_flex_vs_torch2.py, test_decoder_vs_transformers5.py," \
       "test_programs.py's bfloat16 program) did not run" >&2
fi
phase_done "torch 2.x set-up + pytest"
# The AVX2 path on a CPU that has AVX-512 too: the C++ and Python suites again with attn's kernels
# (ATTN_CPU_ISA), oneDNN's (ONEDNN_MAX_CPU_ISA) and OpenBLAS's (OPENBLAS_CORETYPE, unless the
# machine already sets it) capped at AVX2, as an AVX2-only CPU runs them. Elsewhere the runs above
# took the AVX2 path already (or there is none: ARM).
if [[ "$(uname -m)" == x86_64 ]] && grep -qw avx512f /proc/cpuinfo; then
  echo "test: the C++ and Python suites again, every instruction set capped at AVX2"
  capped=(env ATTN_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2
          OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-Haswell}")
  # Not again: what no instruction set reaches (the installed package's consumer, the layers'
  # links, MPI's process handling; in Python the tokenizers, chat templates, the README's
  # compiles, processes killed on purpose, threads and MPI).
  (cd build && "${capped[@]}" ctest --output-on-failure -j"$(nproc)" --timeout 600 \
     -E '^(package_consumer|layers\.|dist_np)')
  "${capped[@]}" PYTHONPATH="$PWD/build/python" /usr/bin/python3 -m pytest -q -p no:cacheprovider \
    "${pytest_jobs[@]}" tests/python \
    --ignore=tests/python/test_tokenizer_json.py --ignore=tests/python/test_chat_template_vs_jinja2.py \
    --ignore=tests/python/test_readme.py --ignore=tests/python/test_faults.py \
    --ignore=tests/python/test_concurrency.py --ignore=tests/python/test_distributed_train.py \
    --ignore=tests/python/test_distributed_python.py --ignore=tests/python/test_check_layers.py
  phase_done "AVX2-capped ctest + pytest"
fi
bash scripts/faults.sh
phase_done faults
bash scripts/sanitize.sh
phase_done "ASan + UBSan, fuzz"
bash scripts/tsan.sh
phase_done TSan
bash scripts/test_aarch64.sh
phase_done AArch64
