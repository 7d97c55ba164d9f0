#!/usr/bin/env bash
# Create .venv (Python 3.11) and install the given requirements files into it, once per change of any
# of them (or of a file they include with -r).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$#" -gt 0 ] || set -- requirements.txt
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
[ -x .venv/bin/python ] || "$python" -m venv .venv
stamp=".venv/.installed-$(cat requirements*.txt "$@" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check $(printf -- '-r %s ' "$@")
  touch "$stamp"
fi
