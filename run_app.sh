#!/usr/bin/env bash
# Install (first time only) and start Sharding Lab on http://localhost:8501 ; extra args go to streamlit.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/venv.sh requirements.txt
exec .venv/bin/python -m streamlit run app.py "$@"
