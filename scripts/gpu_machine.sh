#!/usr/bin/env bash
# The whole course on a GPU machine that already has PyTorch (with CUDA) but cannot download:
#   1. where pip can download:  make gpu-wheels GPU_PYTHON_VERSION=3.12   (the GPU machine's Python)
#   2. bring the checkout, .whl/ included, to the GPU machine
#   3. there, from the checkout:  bash scripts/gpu_machine.sh
# The course's packages are unpacked into a private folder and the machine's own PyTorch is used.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
SITE=${COURSE_GPU_SITE:-/tmp/attention-course-site}

"$PYTHON" -c "import torch" 2>/dev/null || {
  echo "$PYTHON has no PyTorch: this recipe uses the GPU machine's own PyTorch (CUDA build)." >&2
  echo "On a machine that can download, use 'make test-gpu' instead (README: Running on a GPU)." >&2
  exit 2
}
WHEELS=${COURSE_GPU_WHEELS:-.whl}
compgen -G "$WHEELS/*.whl" >/dev/null || {
  echo "No wheels in $WHEELS/: run 'make gpu-wheels GPU_PYTHON_VERSION=<this machine's Python, e.g. 3.12>'" >&2
  echo "where pip can download, and bring .whl/ along with the checkout." >&2
  exit 2
}
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$SITE/bin:$PATH"
exec "$PYTHON" scripts/gpu_suite.py "$@"
