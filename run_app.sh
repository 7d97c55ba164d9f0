#!/usr/bin/env bash
# Install (first time only) and start Sharding Lab on http://localhost:8501 ; extra args go to streamlit.
# The TPU compiler (libtpu, ~700 MB) comes along for the TPU targets; the GPU compiler (~5 GB) only when
# asked: SHARDING_LAB_GPU_COMPILER=1 ./run_app.sh
set -euo pipefail
cd "$(dirname "$0")"
extras=tpu
[ "${SHARDING_LAB_GPU_COMPILER:-0}" = 1 ] && extras=tpu,gpu
bash scripts/venv.sh "$extras"
exec .venv/bin/sharding-lab app "$@"
