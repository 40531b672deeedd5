#!/usr/bin/env bash
# Installs the attn Python package into Debian's system Python with pip, offline (Debian's
# setuptools, wheel, pybind11 and NumPy; nothing is downloaded), then runs
# tests/python/test_python_api.py against the installed copy (from /tmp, without PYTHONPATH).
#   scripts/install_python.sh              install + test
#   scripts/install_python.sh --uninstall  remove it again
# --no-build-isolation: use the installed setuptools instead of downloading one into a fresh
# environment. --break-system-packages: Debian 12 marks its Python as externally managed (PEP 668).
set -euo pipefail
cd "$(dirname "$0")/.."
py=/usr/bin/python3
pip_flags=(--break-system-packages)
if ! $py -m pip install --help | grep -- --break-system-packages >/dev/null; then  # not -q: SIGPIPE
  pip_flags=()  # pip before 23.0.1 has no such flag (and no PEP 668 check)
fi

if [[ "${1:-}" == "--uninstall" ]]; then
  $py -m pip uninstall -y "${pip_flags[@]}" attn
  exit 0
fi

$py -m pip install --no-build-isolation --no-index "${pip_flags[@]}" .
repo="$PWD"
cd /tmp
$py -c "import attn; print('attn', attn.__version__, 'from', attn.__file__)"
$py -c "import attn, sys; sys.exit('attn came from the source tree' if attn.__file__.startswith('$repo/') else 0)"
$py -m pytest -q -p no:cacheprovider --rootdir "$repo" "$repo/tests/python/test_python_api.py"
