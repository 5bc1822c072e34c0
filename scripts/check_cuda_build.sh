#!/usr/bin/env bash
# The CUDA build, checked on a machine without a GPU and as a user with torch from pip but no CUDA
# toolkit: installs the CUDA torch the GPU image uses (PREFETCH_CUDA_TORCH, default torch==2.11.0, a
# CUDA 13.0 build, with its CUDA libraries) into a venv under build/, then, in a mount namespace
# where every CUDA toolkit is hidden (a tmpfs over /usr/local/cuda*, /dev/null over every nvcc on
# PATH), with CUDA_HOME and TORCH_CUDA_ARCH_LIST unset, builds a copy of this checkout against it
# with scripts/install.sh as a user would. That must fetch NVIDIA's nvcc wheels of torch's CUDA
# version into the venv (they are removed first, so that the fetch is checked every time) and take
# the architectures torch was built for. It then imports the build and checks that it has CUDA,
# that nvcc came from the wheels, and that every op has its CUDA kernel registered. With --tests
# it then runs the Python suite with that build (CUDA cases skip): the GPU image's torch version,
# on the CPU; pytest arguments after --tests replace the default `tests` (.ci/run's choice of
# tests is written there).
#
# This compiles every CUDA source with the flags torch gives nvcc, links the extension against
# libtorch_cuda and loads it, so a GPU session starts from a build that is known to work. Nothing
# here runs a kernel. unshare -m needs root (or user namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
spec=${PREFETCH_CUDA_TORCH:-torch==2.11.0}
venv=${PREFETCH_CUDA_VENV:-build/cuda-torch-venv}
tree=build/cuda-build-tree

if [ "${1:-}" = "--hidden-build" ]; then
  # In the mount namespace (private: nothing mounted here is seen outside): no toolkit, no nvcc.
  PY=$2
  for toolkit in /usr/local/cuda /usr/local/cuda-*; do
    if [ -e "$toolkit" ]; then mount -t tmpfs tmpfs "$(realpath "$toolkit")"; fi
  done
  IFS=: read -r -a path_dirs <<<"$PATH"
  for d in "${path_dirs[@]}"; do
    if [ -f "$d/nvcc" ] && [ -x "$d/nvcc" ]; then mount --bind /dev/null "$d/nvcc"; fi
  done
  unset CUDA_HOME CUDA_PATH TORCH_CUDA_ARCH_LIST FORCE_CUDA PREFETCH_FORCE_CPU
  if [ -e /usr/local/cuda/bin/nvcc ] || [ -n "$(which nvcc 2>/dev/null)" ]; then
    echo "check_cuda_build: the CUDA toolkit is still visible" >&2
    exit 1
  fi
  echo "check_cuda_build: CUDA toolkit hidden (no nvcc on PATH, /usr/local/cuda empty);" \
    "CUDA_HOME and TORCH_CUDA_ARCH_LIST unset"
  cd "$tree"
  # install.sh installs the build requirements, NVIDIA's nvcc wheels and the [test] extra from
  # pyproject.toml, with torch held at the venv's CUDA build.
  PREFETCH_EXTRAS=test PREFETCH_REQUIRE_EXTRAS=1 PYTHON=$PY bash scripts/install.sh
  exit 0
fi

run_tests=0
pytest_args=(tests)
if [ "${1:-}" = "--tests" ]; then
  run_tests=1
  shift
  [ $# -gt 0 ] && pytest_args=("$@")
fi

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch; assert torch.version.cuda" 2>/dev/null; then
  echo "check_cuda_build: installing $spec into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q "$spec"
fi
PY=$(cd "$venv" && pwd)/bin/python
"$PY" -c "import torch; print('check_cuda_build: torch', torch.__version__, 'CUDA', torch.version.cuda)"
# The compiler wheels a previous run fetched: install.sh must fetch them again.
"$PY" -m pip uninstall -y -q nvidia-cuda-nvcc nvidia-cuda-crt nvidia-nvvm nvidia-cuda-cccl 2>&1 |
  grep -v "not installed" || true

# A copy of the checkout, so that the build neither replaces nor reuses this checkout's own CPU
# extension.
bash scripts/copy_tree.sh "$tree"

if ! unshare -m --propagation private true 2>/dev/null; then
  echo "check_cuda_build: unshare -m is not permitted here (it needs root or user namespaces)" >&2
  exit 1
fi
unshare -m --propagation private bash "$0" --hidden-build "$PY"

cd "$tree"
"$PY" - <<'EOF'
import json
import os

import torch
import prefetch

assert prefetch.built_with_cuda(), "the extension was built without CUDA"
# Every op with a CPU kernel has a CUDA one, but the JPEG ops (CPU only by design: a GPU decodes
# through prefetch.ops.gpu_jpeg_decoder) and the host stage's gather of byte ranges (it reads host
# memory before the copy: csrc/torch/ops/jpeg_host_ops.cpp).
HOST_ONLY = {"prefetch::_gather_spans"}
has = torch._C._dispatch_has_kernel_for_dispatch_key
ops = [n for n in torch._C._dispatch_get_all_op_names()
       if n.startswith("prefetch::") and has(n, "CPU") and "jpeg" not in n and "decode" not in n
       and n not in HOST_ONLY]
assert len(ops) >= 8, ops
missing = [op for op in ops if not has(op, "CUDA")]
assert not missing, "no CUDA kernel registered for %s" % missing
with open(os.path.join(os.path.dirname(prefetch.__file__), "_build_info.json")) as f:
    build = json.load(f)
assert "nvidia" in build["cuda_home"] and "NVIDIA's wheels" in build["cuda_why"], build
assert build["arch_list_source"].startswith("no GPU visible"), build
print("check_cuda_build: built with CUDA against torch %s, nvcc %s from NVIDIA's wheels (%s), "
      "TORCH_CUDA_ARCH_LIST=%s from torch; CUDA kernels registered for every op"
      % (torch.__version__, build["nvcc_version"], build["cuda_home"], build["arch_list"]))
EOF

if [ "$run_tests" = 1 ]; then
  source scripts/pytest_workers.sh "$PY"
  timeout --signal=TERM --kill-after=30 "${PREFETCH_TEST_TIMEOUT:-1200}" \
    "$PY" -m pytest -q -p no:cacheprovider "${pytest_workers[@]}" "${pytest_args[@]}"
fi
