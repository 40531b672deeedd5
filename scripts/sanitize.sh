#!/usr/bin/env bash
# Builds the C++ tests and the CLI with AddressSanitizer + UndefinedBehaviorSanitizer into
# build-asan/ and runs them (the whole GoogleTest suite, then the walkthrough). Any sanitizer report
# fails the run. About 10 minutes of compiling on 2 cores; not part of scripts/test.sh yet.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test >/dev/null
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTN_BUILD_PYTHON=OFF \
  -DATTN_BUILD_BENCH=OFF -DATTN_BUILD_EXAMPLES=OFF -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build build-asan -j"$(nproc)" --target attn_tests attn_cli >build-asan.log 2>&1 ||
  { tail -50 build-asan.log >&2; exit 1; }
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
build-asan/attn_tests --gtest_brief=1
build-asan/attn walkthrough >/dev/null
echo "sanitize: C++ tests and walkthrough clean under ASan + UBSan"
