#!/usr/bin/env bash
# Sets up .venv with the dev tools, then lint, types and every test (unit + integration on the
# embedded default model). Extra arguments go to pytest, e.g. scripts/test.sh -m "not integration".
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
# Debian's packages the tests use: a real PostgreSQL server for the shared-study tests
# (tests/postgres.py) and Chromium for the report page's browser tests (tests/browser.py).
missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "test: installing Debian's ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# The architecture (docs/architecture.md): tuner's packages layered, no import circle, and
# probes/ importing nothing from tuner/ (the contracts are in pyproject.toml).
.venv/bin/lint-imports
# The benchmarks import each other as top-level modules (sys.path), so they are checked as
# modules of their own folder, with their calls into tuner/ and probes/.
bench_modules=()
for f in benchmarks/*.py; do bench_modules+=(-m "$(basename "$f" .py)"); done
MYPYPATH=benchmarks .venv/bin/mypy "${bench_modules[@]}"
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
# The unit tests spend most of their time waiting on fake engines (together about a third of
# one core): four at a time. Then the real engines, one at a time, on a machine left to them:
# beside the unit tests they ran slower and saw the unit tests' processes (tried: 4 failures).
.venv/bin/python -m pytest -m "not integration and not serial" -n 4
# A trace's send times are checked to within 10 ms of its schedule: beside three other workers
# on 2 cores one request went out 28 ms late (a fresh clone, 2026-12-06), so these run alone.
.venv/bin/python -m pytest -m "serial and not integration"
.venv/bin/python -m pytest -m integration
