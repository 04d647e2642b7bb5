#!/usr/bin/env bash
# Sets up .venv with the dev tools, then lint, types and every test (unit + integration on the
# embedded default model). Extra arguments go to pytest, e.g. scripts/test.sh -m "not integration".
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
# The shared-study tests start a real PostgreSQL server (tests/postgres.py): Debian's.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "test: installing Debian's postgresql (for the shared-study tests)" >&2
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends postgresql
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
