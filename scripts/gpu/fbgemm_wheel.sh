#!/usr/bin/env bash
# Here (the machine without a GPU): download the fbgemm-gpu wheel that matches the device
# image (torch 2.11 cu130, Python 3.12) and split it into parts small enough for one device
# call each (the working tree + one carried path must stay under 64 MiB).
#   bash scripts/gpu/fbgemm_wheel.sh            # -> .whl/fbgemm.part-00 ... (git-ignored)
# Then carry each part in turn (scripts/gpu/README.md) and run install_fbgemm.sh there.
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=${FBGEMM_VERSION:-1.6.0}
PART_MIB=${PART_MIB:-50}
mkdir -p .whl
grep -qx '/.whl/' .gitignore || { echo "/.whl/ must be git-ignored" >&2; exit 1; }
wheel=$(ls .whl/fbgemm_gpu-"$VERSION"-cp312-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ]; then
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "fbgemm-gpu==$VERSION"
  wheel=$(ls .whl/fbgemm_gpu-"$VERSION"-cp312-*.whl | head -1)
fi
rm -f .whl/fbgemm.part-*
split -b "${PART_MIB}M" -d "$wheel" .whl/fbgemm.part-
( cd .whl && sha256sum "$(basename "$wheel")" | sed 's/ .*//' > fbgemm.sha256 && basename "$wheel" > fbgemm.name )
ls -la .whl/fbgemm.part-* | awk '{print $5, $9}'
echo "tree that travels: $(git ls-files -co --exclude-standard | xargs -d '\n' du -cb | tail -1 | cut -f1) bytes"
