#!/usr/bin/env bash
# Create .venv (Python 3.11) and install the given requirements file into it, once per change.
set -euo pipefail
cd "$(dirname "$0")/.."
requirements=${1:-requirements.txt}
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
[ -x .venv/bin/python ] || "$python" -m venv .venv
stamp=".venv/.installed-$(cat requirements.txt "$requirements" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$requirements"
  touch "$stamp"
fi
