#!/usr/bin/env bash
# Installs prefetch from this checkout, with what it needs to build and test, on a fresh machine.
# An installed torch is never replaced; without one, the CPU build named by PREFETCH_TORCH is
# installed (default torch==2.13.0). Nothing already present is reinstalled, so the same script
# works offline on a machine that has everything (the GPU image).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

missing_debs=()
command -v cmake >/dev/null 2>&1 || missing_debs+=(cmake)
[ -f /usr/include/gtest/gtest.h ] || missing_debs+=(libgtest-dev)
if [ ${#missing_debs[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "install.sh: installing ${missing_debs[*]} (C++ core tests)"
    # Not fatal: a machine without a package index (the GPU image) still builds the extension.
    if ! { timeout 300 apt-get update -qq && timeout 300 apt-get install -y -qq "${missing_debs[@]}" >/dev/null; }; then
      echo "install.sh: could not install ${missing_debs[*]}; the C++ tests need them" >&2
    fi
  else
    echo "install.sh: please install ${missing_debs[*]} for the C++ tests" >&2
  fi
fi

if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "install.sh: torch is not installed; installing ${PREFETCH_TORCH:-torch==2.13.0}"
  "$PY" -m pip install -q "${PREFETCH_TORCH:-torch==2.13.0}"
fi

need=()
for mod in ninja pybind11 numpy pytest hypothesis setuptools wheel; do
  "$PY" -c "import $mod" 2>/dev/null || need+=("$mod")
done
if [ ${#need[@]} -gt 0 ]; then "$PY" -m pip install -q "${need[@]}"; fi

# Optional dependencies whose tests skip without them: torchdata (StatefulDataLoader resume),
# Lightning and Ray (the scaling integrations), Pillow (Ray's read_images in the Ray tests). CI
# sets PREFETCH_REQUIRE_EXTRAS=1 so that a failed install fails there instead of skipping
# silently; PREFETCH_SKIP_EXTRAS=1 skips them (machines without a package index, such as the GPU
# image). A constraints file pins torch to the installed build, so none of them can pull another
# torch.
if [ "${PREFETCH_SKIP_EXTRAS:-0}" != 1 ]; then
  constraints=$(mktemp)
  "$PY" -c "import torch; print('torch==' + torch.__version__)" >"$constraints"
  for pair in "torchdata==0.11.0:torchdata.stateful_dataloader" "lightning==2.6.6:lightning.pytorch" \
              "ray[data]==2.60.0:ray.data" "pillow==13.0.0:PIL"; do
    pkg=${pair%%:*}; mod=${pair#*:}
    "$PY" -c "import $mod" 2>/dev/null && continue
    echo "install.sh: installing $pkg (optional; its tests skip without it)"
    if ! "$PY" -m pip install -q -c "$constraints" "$pkg"; then
      if [ "${PREFETCH_REQUIRE_EXTRAS:-0}" = 1 ]; then
        echo "install.sh: could not install $pkg" >&2; exit 1
      fi
      echo "install.sh: could not install $pkg; its tests will skip" >&2
    fi
  done
  rm -f "$constraints"
fi

# --no-build-isolation: build against the torch installed above, never a freshly fetched one.
# --no-deps: every dependency is already here, and pip must not touch torch.
log=$(mktemp)
if ! "$PY" -m pip install --no-build-isolation --no-deps -v -e . >"$log" 2>&1; then
  tail -n 60 "$log" >&2
  echo "install.sh: building prefetch failed (full log: $log)" >&2
  exit 1
fi
grep -E "prefetch build:" "$log" | head -n 1 || true
"$PY" -c "import prefetch; print('install.sh: prefetch %s installed (CUDA: %s)' % (prefetch.__version__, prefetch.built_with_cuda()))"
