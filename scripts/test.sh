#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run the C++ tests (ctest) and the Python
# tests (pytest against python3-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 600)
PYTHONPATH="$PWD/build/python" /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python
