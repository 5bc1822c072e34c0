#!/usr/bin/env bash
# Installs prefetch from this checkout, with what it needs to build and test, on a fresh machine.
# Every Python dependency and its version range is written in pyproject.toml and nowhere else:
# this script installs its build requirements ([build-system] requires) and then the package with
# the extras named by PREFETCH_EXTRAS ([project.optional-dependencies]).
#   PREFETCH_EXTRAS=test,lightning,ray  the extras to install (the default: what scripts/test.sh
#                                       exercises; "bench" for the benchmark's charts, "" for none)
#   PREFETCH_REQUIRE_EXTRAS=1           fail when the extras cannot be installed (CI), instead of
#                                       installing prefetch without them (their tests then skip)
#   PREFETCH_SKIP_EXTRAS=1              a machine without a package index (the GPU image): fetch
#                                       nothing, install no extras; what the build needs must be there
#   PREFETCH_TORCH=torch==2.13.0        installed only when there is no torch
#   PYTHON=python3                      the interpreter to install into
# When torch is a CUDA build and no nvcc of its CUDA version is found (torch from pip, no CUDA
# toolkit), NVIDIA's nvcc wheels of that exact version are installed into the same environment
# (scripts/cuda_from_pip.py names them; setup.py then uses them as CUDA_HOME).
# An installed torch is never replaced: a constraints file holds torch at the installed build, so
# that no dependency can pull another one (an unpinned torch from the index is a CUDA build of
# several GB). Nothing already present is reinstalled.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

extras=${PREFETCH_EXTRAS-test,lightning,ray}
missing_debs=()
# cmake and GoogleTest: the C++ core's tests (scripts/test.sh), wanted with the test extra only.
if [[ ",$extras," == *,test,* ]]; then
  command -v cmake >/dev/null 2>&1 || missing_debs+=(cmake)
  [ -f /usr/include/gtest/gtest.h ] || missing_debs+=(libgtest-dev)
fi
# libjpeg-turbo's headers: the CPU JPEG decoder (Debian's libjpeg-dev is libjpeg-turbo).
[ -f /usr/include/jpeglib.h ] || missing_debs+=(libjpeg-dev)
if [ ${#missing_debs[@]} -gt 0 ]; then
  if [ "${PREFETCH_SKIP_EXTRAS:-0}" = 1 ]; then
    # No package index (the GPU image): apt-get update alone can wait out a stage's time limit.
    echo "install.sh: PREFETCH_SKIP_EXTRAS=1: not installing ${missing_debs[*]} (C++ core tests," \
      "JPEG decoding need them)" >&2
  elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "install.sh: installing ${missing_debs[*]} (C++ core tests, JPEG decoding)"
    # Not fatal: a machine without a package index (the GPU image) still builds the extension.
    if ! { timeout 300 apt-get update -qq && timeout 300 apt-get install -y -qq "${missing_debs[@]}" >/dev/null; }; then
      echo "install.sh: could not install ${missing_debs[*]}; the C++ tests (and, for libjpeg-dev," \
      "JPEG decoding) need them" >&2
    fi
  else
    echo "install.sh: please install ${missing_debs[*]} for the C++ tests (libjpeg-dev: JPEG decoding)" >&2
  fi
fi

if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "install.sh: torch is not installed; installing ${PREFETCH_TORCH:-torch==2.13.0}"
  "$PY" -m pip install -q "${PREFETCH_TORCH:-torch==2.13.0}"
fi

constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
"$PY" -c "import importlib.metadata as m; print('torch==' + m.version('torch'))" >"$constraints"

if [ "${PREFETCH_SKIP_EXTRAS:-0}" = 1 ]; then
  echo "install.sh: PREFETCH_SKIP_EXTRAS=1: no extras, nothing fetched from a package index"
  extras=""
  pip_from=(--no-index --no-deps)
else
  pip_from=(-c "$constraints")
fi

# A CUDA torch without a matching nvcc: NVIDIA's compiler wheels, so that CUDA is not dropped.
# (A failure here is left to setup.py, which stops with the command to run.)
if [ "${PREFETCH_FORCE_CPU:-0}" != 1 ]; then
  cuda_err=$(mktemp)
  if cuda_reqs=$("$PY" scripts/cuda_from_pip.py 2>"$cuda_err"); then
    if [ -n "$cuda_reqs" ]; then
      mapfile -t cuda_reqs <<<"$cuda_reqs"
      if [ "${PREFETCH_SKIP_EXTRAS:-0}" = 1 ]; then
        echo "install.sh: torch is a CUDA build and no nvcc of its CUDA version was found;" \
          "PREFETCH_SKIP_EXTRAS=1 fetches nothing: pip install ${cuda_reqs[*]} would" >&2
      else
        echo "install.sh: torch is a CUDA build and no nvcc of its CUDA version was found;" \
          "installing NVIDIA's compiler from the package index: pip install ${cuda_reqs[*]}"
        "$PY" -m pip install -q "${pip_from[@]}" "${cuda_reqs[@]}" ||
          echo "install.sh: installing ${cuda_reqs[*]} failed" >&2
      fi
    fi
  else
    grep -v "No CUDA runtime is found" "$cuda_err" >&2 || true
  fi
  rm -f "$cuda_err"
fi

# The build requirements: with --no-build-isolation pip does not install them itself.
# (tomllib is in Python >= 3.11; pip carries tomli for 3.10.)
mapfile -t build_requires < <("$PY" -c '
try:
    import tomllib
except ImportError:
    from pip._vendor import tomli as tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["build-system"]["requires"]))')
"$PY" -m pip install -q "${pip_from[@]}" "${build_requires[@]}"

# --no-build-isolation: the extension is built against the torch installed above, never against
# a freshly fetched one.
log=$(mktemp)
# The build's progress, out of pip's verbose output: setup.py's own lines and one per compiled file.
progress() {
  awk '/prefetch build:/ { if (!seen[$0]++) print; fflush(); next }
       /^ *\[[0-9]+\/[0-9]+\] / { src = ""
         for (i = 2; i < NF; i++) if ($i == "-c" && $(i + 1) != "-c") src = $(i + 1)
         if (src == "") { for (i = 2; i <= NF; i++) if ($i == "-o" && i < NF) src = $(i + 1) }
         n = split(src, parts, "/")
         print "  " $1 " " (n ? parts[n] : "linking"); fflush() }'
}
compile_errors() {  # the compiler's own messages: pip's traceback tail alone does not name them
  grep -n -A14 -E '^FAILED: |error:|fatal error' "$log" | grep -v -E '^[0-9]+[-:] +File "' | head -n 80 >&2
}
build() {  # build SPEC; pip's output goes to $log, its progress to stdout
  echo "install.sh: pip install --no-build-isolation -e '$1' (log: $log)"
  "$PY" -m pip install --no-build-isolation "${pip_from[@]}" -v -e "$1" 2>&1 | tee "$log" | progress
  return "${PIPESTATUS[0]}"
}
if [ -n "$extras" ] && ! build ".[$extras]"; then
  tail -n 60 "$log" >&2
  compile_errors
  # The extension itself failed to compile: installing without the extras would fail the same way.
  if grep -q "Building editable for prefetch.*status 'error'" "$log"; then
    echo "install.sh: building prefetch failed (full log: $log)" >&2
    exit 1
  fi
  if [ "${PREFETCH_REQUIRE_EXTRAS:-0}" = 1 ]; then
    echo "install.sh: installing prefetch with the extras [$extras] failed (full log: $log)" >&2
    exit 1
  fi
  echo "install.sh: could not install prefetch with the extras [$extras]; installing it" \
    "without them (their tests will skip)" >&2
  extras=""
fi
if [ -z "$extras" ] && ! build .; then
  tail -n 60 "$log" >&2
  compile_errors
  echo "install.sh: building prefetch failed (full log: $log)" >&2
  exit 1
fi
"$PY" -c "import prefetch; print('install.sh: prefetch %s installed (CUDA: %s, JPEG decoding: %s)' % (prefetch.__version__, prefetch.built_with_cuda(), prefetch.built_with_jpeg()))"
