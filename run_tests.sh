#!/usr/bin/env bash
# Install (first time only) what the tests need — Python packages, and Debian's Chromium, PostgreSQL and nginx
# for the end-to-end tests when missing — then run the whole suite in two processes. Extra args go to pytest.
# The environment is .venv on the newest Python (scripts/venv.sh says which); VENV=.venv-py311 PYTHONS=3.11 makes
# and uses another (.ci/run tests the Python 3.11 / JAX 0.10.2 stack so).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/venv.sh test
bash scripts/maxtext_env.sh || echo "no MaxText environment (scripts/maxtext_env.sh): tests/core/test_maxtext_loader.py will fail"
# Debian's packages the end-to-end tests drive: Chromium; PostgreSQL and nginx (tests/e2e/test_scale_out.py runs
# a real database and the project's load balancer configuration on loopback).
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium chromium-driver)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") \
    >/tmp/sharding-lab-apt.log 2>&1 || echo "could not install ${missing[*]} (see /tmp/sharding-lab-apt.log)"
fi
# Two test processes, a test file each at a time (its module's compiles and servers stay shared): alone the
# suite keeps 1.1 of two cores busy (24 → 15 min, docs/measurements.md). `-n 0` runs it in this one.
exec "${VENV:-.venv}/bin/python" -m pytest -n 2 --dist loadfile "$@"
