#!/usr/bin/env bash
# The sealed test's one command (studies/sealed_test/README.md, "The sealed-set rule"): set up
# the virtual environment, then plan and measure every task of the newest sealed set's manifest
# (studies/sealed_test/draw.py SETS; an older set by name, for the record) with the fixed settings
# of studies/sealed_test/run.py (every shipped method at its defaults, 8 paired rounds x 2
# sittings). Run once per sealed set; nothing is tuned on its results.
#   bash scripts/sealed_test.sh                                   # newest set; no GPU visible: profile cpu
#   SHARDLAB_CUDA=1 bash scripts/sealed_test.sh --profile h100    # on a GPU machine
#   bash scripts/sealed_test.sh --set 1                           # the first set, for the record
#   bash scripts/sealed_test.sh --budget 107s                     # each task within a time budget
# Writes studies/sealed_test/results/sealed-<UTC time>.{jsonl,md}; earlier runs are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
while [ $# -gt 0 ]; do
  if [ $# -ge 2 ] && { [ "$1" = --profile ] || [ "$1" = --set ] || [ "$1" = --budget ]; }; then
    args+=("$1" "$2")
    shift 2
  else
    echo "usage: bash scripts/sealed_test.sh [--set NAME] [--profile NAME] [--budget DURATION]" >&2
    exit 2
  fi
done
bash scripts/setup.sh
exec "${SHARDLAB_VENV:-.venv}/bin/python" studies/sealed_test/run.py "${args[@]}"
