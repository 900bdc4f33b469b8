#!/usr/bin/env bash
# Create the virtual environment .venv and install shardlab with everything the tests and
# notebooks need. Idempotent: a second run with unchanged pyproject.toml, this script and mode
# does nothing. Two modes:
#   bash scripts/setup.sh                  # CPU: torch 2.13.0 (CPU build) + fbgemm-gpu-cpu 1.8.0,
#                                          # pyproject.toml's `dev` extra
#   SHARDLAB_CUDA=1 bash scripts/setup.sh  # CUDA: torch 2.13.0 + fbgemm-gpu 1.8.0, both CUDA 13
#                                          # builds from the PyTorch index, then the `dev-cuda` extra
# Switching mode reinstalls (the stamp records the mode). Env: PYTHON (interpreter, default
# python3.11 else python3), SHARDLAB_VENV (default .venv), SHARDLAB_TORCH_INDEX (CPU mode: an
# extra pip index for the CPU build of torch; needed on machines whose pip would otherwise fetch
# the CUDA build), SHARDLAB_CUDA_INDEX (CUDA mode: the PyTorch index, default its cu130 one),
# SHARDLAB_TORCHREC=0 to skip torchrec (the optional TorchRec baseline and importer),
# SHARDLAB_SETUP_DRY_RUN=1 to print the commands it would run and exit, creating nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
# The pins: the same as pyproject.toml's (tests/test_setup_pins.py checks that they agree).
torch_version=2.13.0
fbgemm_version=1.8.0
torchrec_version=1.8.0
cuda=${SHARDLAB_CUDA:-0}
dry=${SHARDLAB_SETUP_DRY_RUN:-0}
venv=${SHARDLAB_VENV:-.venv}
py=${PYTHON:-}
if [ -z "$py" ]; then
  if command -v python3.11 >/dev/null 2>&1; then py=python3.11; else py=python3; fi
fi
if [ "$cuda" = 1 ]; then
  mode=cuda; extras=dev-cuda; other=fbgemm-gpu-cpu
  cuda_index=${SHARDLAB_CUDA_INDEX:-https://download.pytorch.org/whl/cu130}
else
  mode=cpu; extras=dev; other=fbgemm-gpu
fi
[ "$dry" = 1 ] || mkdir -p runs  # where notebooks' executed copies and outputs go (git-ignored)
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$mode" = cuda ]; then want="$want cuda"; fi   # a CPU and a CUDA install never share a stamp
stamp="$venv/.shardlab-installed"

# run CMD...: run it, or in a dry run print it (arguments quoted where the shell needs it).
run() {
  if [ "$dry" = 1 ]; then
    local a out=()
    for a in "$@"; do
      if [[ "$a" =~ ^[A-Za-z0-9_./=:@,+-]+$ ]]; then out+=("$a"); else out+=("${a@Q}"); fi
    done
    echo "${out[*]}"
  else
    "$@"
  fi
}

if [ "$dry" = 1 ]; then
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "# setup ($mode): $venv is up to date; a real run would do nothing. From scratch it runs:"
  else
    echo "# setup ($mode): a real run would run:"
  fi
elif [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
else
  echo "setup: creating $venv with $($py --version) and installing shardlab[$extras] (about a minute)" >&2
fi
pip=("$venv/bin/python" -m pip)
# A venv switched between modes: remove the other mode's torch and fbgemm first (both fbgemm
# builds install the same fbgemm_gpu package, and pip would keep either build of torch 2.13.0).
if [ -x "$venv/bin/python" ] && "${pip[@]}" show "$other" >/dev/null 2>&1; then
  run "${pip[@]}" uninstall -q -y torch "$other"
fi
run "$py" -m venv "$venv"
if [ "$mode" = cuda ]; then
  # torch and fbgemm-gpu from the PyTorch CUDA index first (CUDA 13 builds, fbgemm 1.8 <-> torch
  # 2.13); the extras' pins below are then already met and pip keeps these builds.
  run "${pip[@]}" install -q --disable-pip-version-check --index-url "$cuda_index" \
    "torch==$torch_version" "fbgemm-gpu==$fbgemm_version"
  run "${pip[@]}" install -q --disable-pip-version-check -e ".[$extras]"
else
  extra=()
  if [ -n "${SHARDLAB_TORCH_INDEX:-}" ]; then extra=(--extra-index-url "$SHARDLAB_TORCH_INDEX"); fi
  run "${pip[@]}" install -q --disable-pip-version-check "${extra[@]}" -e ".[$extras]"
fi
# torchrec's metadata requires the CUDA fbgemm-gpu, which would replace fbgemm-gpu-cpu: install
# it without dependencies (its own are in the `torchrec` extra above); the same in both modes.
if [ "${SHARDLAB_TORCHREC:-1}" != 0 ]; then
  run "${pip[@]}" install -q --disable-pip-version-check --no-deps "torchrec==$torchrec_version"
fi
# rfc3987-syntax (pulled in through jsonschema's format extras) makes `import nbformat` cost
# 2-3 s; nothing here validates that format, and removing it halves papermill/nbval start-up.
if [ "$dry" = 1 ]; then
  run "${pip[@]}" uninstall -q -y rfc3987-syntax
  run "${pip[@]}" check
  exit 0
fi
"${pip[@]}" uninstall -q -y rfc3987-syntax >/dev/null 2>&1 || true
# pip check; on CPU less the one line we accept: torchrec's declared need of the CUDA fbgemm-gpu
# (in CUDA mode fbgemm-gpu is installed, so nothing is excused).
if ! problems=$("${pip[@]}" check 2>&1); then
  if [ "$mode" = cpu ]; then
    problems=$(grep -v "^torchrec .* requires fbgemm-gpu, which is not installed" <<<"$problems" || true)
  fi
  if [ -n "$problems" ]; then echo "setup: pip check failed: $problems" >&2; exit 1; fi
fi
echo "$want" > "$stamp"
