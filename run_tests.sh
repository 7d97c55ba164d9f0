#!/usr/bin/env bash
# Install (first time only) what the tests need — Python packages, and Debian's Chromium for the
# browser test when missing — then run the whole suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/venv.sh test
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) \
    >/tmp/sharding-lab-apt.log 2>&1 || echo "could not install chromium (see /tmp/sharding-lab-apt.log)"
fi
exec .venv/bin/python -m pytest "$@"
