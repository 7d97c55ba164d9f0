#!/usr/bin/env bash
# Create a virtual environment (.venv, or $VENV) and install the lab into it, editable, with the given extras
# (e.g. `tpu`, `tpu,gpu`, `test`), every version held by the constraints file of its Python's stack:
#   Python 3.12 and 3.13 → constraints-py312.txt (JAX 0.12.1, Flax 0.12.12: the newest stack)
#   Python 3.11          → constraints.txt       (JAX 0.10.2, Flax 0.12.8: the newest JAX for 3.11)
# It picks the newest Python from 3.13 down to 3.11 on the machine (a fresh Debian 12 has only 3.11, and gets the
# 3.11 stack); PYTHON=/path/to/python names one, PYTHONS="3.11" limits the versions tried (newest first). An existing environment keeps its Python (remove it to
# move to a newer one). Installs once per change of the extras, pyproject.toml or the constraints file; uv
# (pinned, installed into the environment itself) does it in seconds from its cache where pip's resolver
# takes minutes, and pip takes over where uv cannot.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-tpu}
env=${VENV:-.venv}
uv=uv==0.13.10

# Only interpreters that really run: pyenv's shims answer to python3.13 and then fail when that version is not
# selected, so each candidate is asked for its version.
version_of() { "$1" -c 'import sys; v = sys.version_info; print(f"{v[0]}.{v[1]}")' 2>/dev/null; }
supported() { case "$1" in 3.11 | 3.12 | 3.13) return 0 ;; *) return 1 ;; esac; }

if [ -x "$env/bin/python" ]; then
  python="$env/bin/python"
else
  python=
  if [ -n "${PYTHON:-}" ]; then
    supported "$(version_of "$PYTHON")" || { echo "scripts/venv.sh: PYTHON=$PYTHON is not Python 3.11-3.13" >&2; exit 1; }
    python=$PYTHON
  else
    for version in ${PYTHONS:-3.13 3.12 3.11}; do
      for candidate in "python$version" "$HOME"/.pyenv/versions/"$version".*/bin/python; do
        if [ "$(version_of "$candidate")" = "$version" ]; then python=$candidate && break 2; fi
      done
    done
  fi
  if [ -z "$python" ]; then
    echo "scripts/venv.sh: the lab needs Python ${PYTHONS:-3.11, 3.12 or 3.13} and none was found: install one" \
      "(apt-get install python3, or pyenv install 3.13) or name it with PYTHON=/path/to/python" >&2
    exit 1
  fi
  "$python" -m venv "$env"
fi
version=$(version_of "$env/bin/python")
supported "$version" || { echo "scripts/venv.sh: $env holds Python $version; the lab needs 3.11-3.13: remove $env" >&2; exit 1; }
constraints=constraints-py312.txt
[ "$version" = 3.11 ] && constraints=constraints.txt

stamp="$env/.installed-$(cat pyproject.toml "$constraints" <(echo "$extras") | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "installing Sharding Lab [$extras] into $env: Python $version, every version from $constraints" >&2
  if ! { "$env/bin/python" -m pip install --quiet --disable-pip-version-check "$uv" &&
    VIRTUAL_ENV="$(cd "$env" && pwd)" "$env/bin/uv" pip install --quiet --python "$env/bin/python" \
      -c "$constraints" -e ".[$extras]"; }; then
    echo "uv could not install it; pip will (slower)" >&2
    "$env/bin/python" -m pip install --quiet --disable-pip-version-check -c "$constraints" -e ".[$extras]"
  fi
  rm -f "$env"/.installed-*
  touch "$stamp"
fi
describe='import platform; from importlib.metadata import version as v
print("Python", platform.python_version() + ", JAX", v("jax") + ", Flax", v("flax"))'
echo "$env: $("$env/bin/python" -c "$describe") ($constraints)" >&2
