#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run the C++ tests (ctest), the Python
# tests (pytest against python3-torch), scripts/faults.sh (faults produced on purpose against
# `attn train`: kill -9, a second run on one --out, a full disk, NaN/inf, out of memory; see
# docs/reliability.md), then scripts/sanitize.sh: the C++ tests and the walkthrough again under
# AddressSanitizer + UndefinedBehaviorSanitizer, and every libFuzzer target for a bounded time
# over its seed corpus and its regression inputs; scripts/tsan.sh: concurrent use from several
# threads under ThreadSanitizer; and scripts/test_aarch64.sh: the kernel and autograd tests
# cross-built for AArch64 (NEON) and run under qemu-user.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 600)
PYTHONPATH="$PWD/build/python" /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python
bash scripts/faults.sh
bash scripts/sanitize.sh
bash scripts/tsan.sh
bash scripts/test_aarch64.sh
