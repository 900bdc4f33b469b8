#!/usr/bin/env bash
# Create the virtual environment .venv and install shardlab with everything the tests and
# notebooks need (pyproject.toml's `dev` extra). Idempotent: a second run with unchanged
# pyproject.toml does nothing. Env: PYTHON (interpreter, default python3.11 else python3),
# SHARDLAB_VENV (default .venv), SHARDLAB_TORCH_INDEX (an extra pip index for the CPU build
# of torch; needed on machines whose pip would otherwise fetch the CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${SHARDLAB_VENV:-.venv}
py=${PYTHON:-}
if [ -z "$py" ]; then
  if command -v python3.11 >/dev/null 2>&1; then py=python3.11; else py=python3; fi
fi
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
stamp="$venv/.shardlab-installed"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "setup: creating $venv with $($py --version) and installing shardlab[dev] (about a minute)" >&2
"$py" -m venv "$venv"
extra=()
if [ -n "${SHARDLAB_TORCH_INDEX:-}" ]; then extra=(--extra-index-url "$SHARDLAB_TORCH_INDEX"); fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "${extra[@]}" -e ".[dev]"
# rfc3987-syntax (pulled in through jsonschema's format extras) makes `import nbformat` cost
# 2-3 s; nothing here validates that format, and removing it halves papermill/nbval start-up.
"$venv/bin/python" -m pip uninstall -q -y rfc3987-syntax >/dev/null 2>&1 || true
"$venv/bin/python" -m pip check >&2 || { echo "setup: pip check failed" >&2; exit 1; }
echo "$want" > "$stamp"
