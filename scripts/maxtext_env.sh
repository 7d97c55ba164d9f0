#!/usr/bin/env bash
# Make .venv-maxtext: MaxText 0.2.5 with its TPU extras, in its own Python >= 3.12 (MaxText needs it; the lab's
# .venv is 3.11 on another JAX), installed by uv (pip's resolver takes far longer on MaxText's ~240 packages), every
# version held by constraints-maxtext.txt. Once per change of this script or that file. tools/maxtext_read.py runs
# there: `.venv-maxtext/bin/python tools/maxtext_read.py`. MAXTEXT_PYTHON=/path/to/python3.12 picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
env=.venv-maxtext
maxtext=maxtext[tpu]==0.2.5
uv=uv==0.13.10
stamp="$env/.installed-$(cat scripts/maxtext_env.sh constraints-maxtext.txt | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && exit 0

# The first interpreter that really is >= 3.12 (pyenv's shims answer to python3.12 and then fail to run it).
python=
for candidate in "${MAXTEXT_PYTHON:-}" python3.12 python3.13 "$HOME"/.pyenv/versions/3.12*/bin/python \
  "$HOME"/.pyenv/versions/3.13*/bin/python /usr/bin/python3; do
  if [ -n "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
    python=$candidate
    break
  fi
done
if [ -z "$python" ]; then
  echo "scripts/maxtext_env.sh: MaxText 0.2.5 needs Python >= 3.12 and none was found: install one" \
    "(apt-get install python3.12, or pyenv install 3.12) or name it with MAXTEXT_PYTHON=/path/to/python" >&2
  exit 1
fi
echo "making $env ($maxtext, $("$python" -V) at $python; a few minutes the first time)" >&2
rm -rf "$env"
"$python" -m venv "$env"
"$env/bin/python" -m pip install --quiet --disable-pip-version-check "$uv"
VIRTUAL_ENV="$PWD/$env" "$env/bin/uv" pip install --quiet --python "$env/bin/python" \
  -c constraints-maxtext.txt "$maxtext"
touch "$stamp"
