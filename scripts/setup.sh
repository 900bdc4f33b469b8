#!/usr/bin/env bash
# Create the virtual environment .venv and install shardlab with everything the tests and
# notebooks need (pyproject.toml's `dev` extra). Idempotent: a second run with unchanged
# pyproject.toml does nothing. Env: PYTHON (interpreter, default python3.11 else python3),
# SHARDLAB_VENV (default .venv), SHARDLAB_TORCH_INDEX (an extra pip index for the CPU build
# of torch; needed on machines whose pip would otherwise fetch the CUDA build),
# SHARDLAB_TORCHREC=0 to skip torchrec (the optional TorchRec baseline and importer).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p runs  # where notebooks' executed copies and outputs go (git-ignored)
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
# torchrec's metadata requires the CUDA fbgemm-gpu, which would replace fbgemm-gpu-cpu: install
# it without dependencies (its own are in the `torchrec` extra above).
torchrec_version=1.8.0
if [ "${SHARDLAB_TORCHREC:-1}" != 0 ]; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "torchrec==$torchrec_version"
fi
# rfc3987-syntax (pulled in through jsonschema's format extras) makes `import nbformat` cost
# 2-3 s; nothing here validates that format, and removing it halves papermill/nbval start-up.
"$venv/bin/python" -m pip uninstall -q -y rfc3987-syntax >/dev/null 2>&1 || true
# pip check, less the one line we accept: torchrec's declared need of the CUDA fbgemm-gpu.
if ! problems=$("$venv/bin/python" -m pip check 2>&1); then
  problems=$(grep -v "^torchrec .* requires fbgemm-gpu, which is not installed" <<<"$problems" || true)
  if [ -n "$problems" ]; then echo "setup: pip check failed: $problems" >&2; exit 1; fi
fi
echo "$want" > "$stamp"
