"""Builds prefetch._C with torch.utils.cpp_extension (ninja).

CUDA sources are compiled when the installed torch is a CUDA build and nvcc is found; a visible
GPU is never required. PREFETCH_FORCE_CPU=1 opts out, FORCE_CUDA=1 forces CUDA on (and fails
loudly if it cannot). TORCH_CUDA_ARCH_LIST, MAX_JOBS and DEBUG are honoured;
PREFETCH_SANITIZE=address,undefined instruments the C++ code (scripts/sanitize.sh python).
"""
import glob
import os
import shutil
import sys

from setuptools import setup

try:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension
except ImportError:
    sys.exit(
        "prefetch builds against the installed torch, and none is installed.\n"
        "Install torch first (e.g. pip install torch), then build without isolation:\n"
        "    pip install --no-build-isolation -e ."
    )

ROOT = os.path.dirname(os.path.abspath(__file__))


def flag(name):
    return os.environ.get(name, "0").lower() in ("1", "true", "yes", "on")


def resolve_cuda():
    torch_cuda = torch.version.cuda is not None
    nvcc = shutil.which("nvcc") or (CUDA_HOME and os.path.join(CUDA_HOME, "bin", "nvcc"))
    nvcc = nvcc if nvcc and os.path.exists(nvcc) else None
    if flag("PREFETCH_FORCE_CPU"):
        return False, "off (PREFETCH_FORCE_CPU=1)"
    if flag("FORCE_CUDA"):
        if not torch_cuda:
            sys.exit("FORCE_CUDA=1 but torch %s is a CPU build; install a CUDA build of torch." % torch.__version__)
        if not nvcc:
            sys.exit("FORCE_CUDA=1 but nvcc was not found (CUDA_HOME=%s)." % CUDA_HOME)
        return True, "on (FORCE_CUDA=1, nvcc %s)" % nvcc
    if torch_cuda and nvcc:
        return True, "on (torch CUDA %s, nvcc %s)" % (torch.version.cuda, nvcc)
    if not torch_cuda:
        return False, "off (torch %s is a CPU build)" % torch.__version__
    return False, "off (torch has CUDA %s but nvcc was not found)" % torch.version.cuda


def sources(pattern):
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern)))


with_cuda, why = resolve_cuda()
debug = flag("DEBUG")
cxx_flags = ["-O0", "-g"] if debug else ["-O3"]
cxx_flags += ["-std=c++17", "-Wall", "-Wno-unused-parameter"]
# PREFETCH_SANITIZE=address,undefined: the extension instrumented, for scripts/sanitize.sh python
# (run with the sanitizer runtimes preloaded into an uninstrumented Python).
sanitize = os.environ.get("PREFETCH_SANITIZE", "")
link_flags = []
if sanitize:
    cxx_flags += ["-fsanitize=" + sanitize, "-fno-omit-frame-pointer", "-g"]
    link_flags += ["-fsanitize=" + sanitize]
define_macros = [("PREFETCH_WITH_CUDA", None)] if with_cuda else []

srcs = sources("csrc/core/*.cpp") + sources("csrc/kernels/*.cpp") + sources("csrc/torch/*_binding.cpp") + ["csrc/torch/ops.cpp"]
if with_cuda:
    srcs += ["csrc/torch/cuda_support.cpp"] + sources("csrc/kernels/*.cu") + sources("csrc/torch/cuda/*.cpp")
    nvcc_flags = ["-O0", "-g", "-G"] if debug else ["-O3"]  # no fast-math: CPU and CUDA round alike
    ext = CUDAExtension(
        "prefetch._C",
        srcs,
        include_dirs=[os.path.join(ROOT, d) for d in ("csrc/core", "csrc/kernels", "csrc/torch")],
        define_macros=define_macros,
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags + ["-std=c++17"]},
        extra_link_args=link_flags,
    )
else:
    srcs += ["csrc/torch/cuda_support_stub.cpp"]
    ext = CppExtension(
        "prefetch._C",
        srcs,
        include_dirs=[os.path.join(ROOT, d) for d in ("csrc/core", "csrc/kernels", "csrc/torch")],
        define_macros=define_macros,
        extra_compile_args={"cxx": cxx_flags},
        extra_link_args=link_flags,
    )

print(
    "prefetch build: torch %s | CUDA %s | TORCH_CUDA_ARCH_LIST=%s | MAX_JOBS=%s | DEBUG=%s%s"
    % (torch.__version__, why, os.environ.get("TORCH_CUDA_ARCH_LIST", "(torch default)"),
       os.environ.get("MAX_JOBS", "(ninja default)"), int(debug),
       " | sanitizers: " + sanitize if sanitize else ""),
    flush=True,
)

setup(ext_modules=[ext], cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)})
