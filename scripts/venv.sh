#!/usr/bin/env bash
# Create .venv (Python 3.11) and install the lab into it, editable, with the given extras (e.g. `tpu`,
# `tpu,gpu`, `test`), every version held by constraints.txt — once per change of the extras,
# pyproject.toml or constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-tpu}
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
[ -x .venv/bin/python ] || "$python" -m venv .venv
stamp=".venv/.installed-$(cat pyproject.toml constraints.txt <(echo "$extras") | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[$extras]"
  rm -f .venv/.installed-*
  touch "$stamp"
fi
