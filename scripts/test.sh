#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run the C++ tests (ctest), the Python
# tests (pytest against python3-torch), then scripts/sanitize.sh: the C++ tests and the
# walkthrough again under AddressSanitizer + UndefinedBehaviorSanitizer, and every libFuzzer
# target for a bounded time over its seed corpus and its regression inputs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 600)
PYTHONPATH="$PWD/build/python" /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python
bash scripts/sanitize.sh
