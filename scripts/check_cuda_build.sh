#!/usr/bin/env bash
# The CUDA build, checked on a machine without a GPU: installs the CUDA torch the GPU image uses
# (PREFETCH_CUDA_TORCH, default torch==2.11.0, a CUDA 13.0 build, with its CUDA libraries) into a
# venv under build/, builds a copy of this checkout against it as the GPU machine does
# (scripts/install.sh, FORCE_CUDA=1, TORCH_CUDA_ARCH_LIST=9.0), imports it, and checks that every
# op has its CUDA kernel registered. With --tests it then runs the Python suite with that build
# (CUDA cases skip): the GPU image's torch version, on the CPU.
#
# This compiles every CUDA source with the flags torch gives nvcc, links the extension against
# libtorch_cuda and loads it, so a GPU session starts from a build that is known to work. Nothing
# here runs a kernel.
set -euo pipefail
cd "$(dirname "$0")/.."
spec=${PREFETCH_CUDA_TORCH:-torch==2.11.0}
venv=${PREFETCH_CUDA_VENV:-build/cuda-torch-venv}
tree=build/cuda-build-tree
run_tests=0
[ "${1:-}" = "--tests" ] && run_tests=1

if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then export CUDA_HOME=/usr/local/cuda; fi
if [ ! -x "${CUDA_HOME:-/nonexistent}/bin/nvcc" ]; then
  echo "check_cuda_build: no nvcc under CUDA_HOME=${CUDA_HOME:-unset}; cannot check" >&2
  exit 1
fi
export PATH=$CUDA_HOME/bin:$PATH

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch; assert torch.version.cuda" 2>/dev/null; then
  echo "check_cuda_build: installing $spec into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q "$spec"
fi
PY=$(cd "$venv" && pwd)/bin/python
"$PY" -c "import torch; print('check_cuda_build: torch', torch.__version__, 'CUDA', torch.version.cuda)"

# A copy of the checkout, so that the build neither replaces nor reuses this checkout's own CPU
# extension.
bash scripts/copy_tree.sh "$tree"

cd "$tree"
# install.sh installs the build requirements and the [test] extra from pyproject.toml, with torch
# held at the venv's CUDA build.
FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} PREFETCH_EXTRAS=test \
  PREFETCH_REQUIRE_EXTRAS=1 PYTHON=$PY bash scripts/install.sh
"$PY" - <<'EOF'
import torch
import prefetch

assert prefetch.built_with_cuda(), "the extension was built without CUDA"
missing = [op for op in ("normalize_flip", "flip_crop", "resized_crop")
           if not torch._C._dispatch_has_kernel_for_dispatch_key("prefetch::" + op, "CUDA")]
assert not missing, "no CUDA kernel registered for %s" % missing
print("check_cuda_build: built with CUDA against torch %s; CUDA kernels registered for every op"
      % torch.__version__)
EOF

if [ "$run_tests" = 1 ]; then
  timeout --signal=TERM --kill-after=30 "${PREFETCH_TEST_TIMEOUT:-1200}" \
    "$PY" -m pytest tests -q -p no:cacheprovider
fi
