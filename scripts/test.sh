#!/usr/bin/env bash
# Sets up .venv with the dev tools, then lint, types and every test (unit + integration on the
# embedded default model). Extra arguments go to pytest, e.g. scripts/test.sh -m "not integration".
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
