#!/usr/bin/env bash
# On the device machine: collect the carried wheel parts, and once all are there, reassemble,
# check and install the fbgemm-gpu wheel into /tmp/site (kept while the machine stays warm).
#   bash scripts/gpu/install_fbgemm.sh stash     # copy the carried .whl/fbgemm.part-* to /tmp/fbw
#   bash scripts/gpu/install_fbgemm.sh install   # reassemble + pip install --no-deps --target
# Afterwards: export PYTHONPATH=/tmp/site:$PWD
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=${FBGEMM_VERSION:-1.6.0}
NAME=fbgemm_gpu-$VERSION-cp312-cp312-manylinux_2_28_x86_64.whl
mkdir -p /tmp/fbw
case "${1:-}" in
  stash)
    cp .whl/fbgemm.part-* /tmp/fbw/ 2>/dev/null || true
    ls /tmp/fbw | tr '\n' ' '; echo ;;
  install)
    if python3 -c "import sys; sys.path.insert(0, '/tmp/site'); import fbgemm_gpu" 2>/dev/null; then
      echo "fbgemm_gpu already in /tmp/site"; exit 0; fi
    cat /tmp/fbw/fbgemm.part-* > "/tmp/fbw/$NAME"
    echo "$(cat scripts/gpu/fbgemm-$VERSION.sha256)  /tmp/fbw/$NAME" | sha256sum -c -
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "/tmp/fbw/$NAME"
    rm -f "/tmp/fbw/$NAME"
    PYTHONPATH=/tmp/site python3 -c "import torch, fbgemm_gpu; print('torch', torch.__version__, 'fbgemm_gpu', fbgemm_gpu.__version__, torch.cuda.get_device_name())" ;;
  *) echo "usage: install_fbgemm.sh stash|install" >&2; exit 2 ;;
esac
