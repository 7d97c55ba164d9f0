#!/usr/bin/env bash
# Install (first time only) and start Sharding Lab on http://localhost:8501 ; extra args go to streamlit.
# The TPU compiler (libtpu, ~700 MB) comes along for the TPU targets; the GPU compiler (~5 GB) only when
# asked: SHARDING_LAB_GPU_COMPILER=1 ./run_app.sh
set -euo pipefail
cd "$(dirname "$0")"
files=(requirements.txt requirements-targets.txt)
[ "${SHARDING_LAB_GPU_COMPILER:-0}" = 1 ] && files+=(requirements-targets-gpu.txt)
bash scripts/venv.sh "${files[@]}"
exec .venv/bin/python -m streamlit run app.py "$@"
