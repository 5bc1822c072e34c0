#!/usr/bin/env bash
# Compile-checks the files that are built only against a CUDA torch (csrc/torch/cuda_support.cpp,
# csrc/torch/cuda/*.cpp, and the binding with PREFETCH_WITH_CUDA) on a machine without one: it
# fetches the headers of the CUDA torch the GPU image uses (PREFETCH_CUDA_TORCH, default
# torch==2.11.0) and runs the compiler with -fsyntax-only. The torch-free CUDA code is compiled by
# CMake with nvcc (scripts/test.sh); together they cover every CUDA source without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
spec=${PREFETCH_CUDA_TORCH:-torch==2.11.0}
cache=${PREFETCH_CUDA_TORCH_CACHE:-build/cuda-torch-headers}
cuda_inc=${CUDA_HOME:-/usr/local/cuda}/include

if [ ! -f "$cuda_inc/cuda_runtime_api.h" ]; then
  echo "check_cuda_torch_layer: no CUDA toolkit headers in $cuda_inc; cannot check" >&2
  exit 1
fi
if [ ! -d "$cache/torch/include/c10/cuda" ]; then
  mkdir -p "$cache/wheel"
  "$PY" -m pip download -q "$spec" --no-deps --only-binary=:all: -d "$cache/wheel" \
    --platform manylinux_2_28_x86_64 --python-version "$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  "$PY" - "$cache" <<'PYEOF'
import glob, sys, zipfile
cache = sys.argv[1]
wheel = glob.glob(cache + "/wheel/torch-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    z.extractall(cache, [n for n in z.namelist() if n.startswith("torch/include/") or n == "torch/version.py"])
PYEOF
  rm -rf "$cache/wheel"
fi
inc=$cache/torch/include
pyinc=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
status=0
for f in csrc/torch/cuda_support.cpp csrc/torch/cuda/*.cpp csrc/torch/engine_binding.cpp csrc/torch/ops.cpp; do
  if g++ -std=c++17 -fsyntax-only -Wall -DPREFETCH_WITH_CUDA -DTORCH_EXTENSION_NAME=_C \
      -I"$inc" -I"$inc/torch/csrc/api/include" -I"$cuda_inc" -I"$pyinc" \
      -Icsrc/core -Icsrc/kernels -Icsrc/torch "$f"; then
    echo "check_cuda_torch_layer: $f ok"
  else
    echo "check_cuda_torch_layer: $f FAILED" >&2
    status=1
  fi
done
echo "check_cuda_torch_layer: checked against $(grep "^__version__" "$cache/torch/version.py")"
exit $status
