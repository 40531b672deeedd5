#!/usr/bin/env bash
# The main job: install what is missing, build, and walk through every seed computation.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec build/attn walkthrough "$@"
