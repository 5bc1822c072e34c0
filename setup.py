"""Builds prefetch._C with torch.utils.cpp_extension (ninja).

What is compiled and with which flags is csrc/build_config.txt, which CMakeLists.txt reads too;
this file only decides which of its sections this build uses. CUDA sources are compiled when the
installed torch is a CUDA build and nvcc is found; a visible GPU is never required.
PREFETCH_FORCE_CPU=1 opts out, FORCE_CUDA=1 forces CUDA on (and fails loudly if it cannot).
TORCH_CUDA_ARCH_LIST, MAX_JOBS and DEBUG are honoured; PREFETCH_SANITIZE=address|thread
instruments the C++ code (its meaning is written in csrc/build_config.txt; scripts/sanitize.sh
python uses address).
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


SOURCE_SECTIONS = ("core", "decode", "kernels_cpu", "kernels_cuda", "torch", "torch_cpu_only", "torch_cuda")
SECTIONS = SOURCE_SECTIONS + ("include_core", "include_torch", "standard", "warnings", "cuda_defines",
                              "sanitize_address", "sanitize_thread")


def read_build_config(path=os.path.join(ROOT, "csrc", "build_config.txt")):
    """csrc/build_config.txt as {section: [items]} (its format is described at its top)."""
    config, section = {}, None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
                if section not in SECTIONS:
                    sys.exit("%s:%d: unknown section [%s]" % (path, n, section))
                config.setdefault(section, [])
            elif section is None:
                sys.exit("%s:%d: %r is outside any section" % (path, n, line))
            else:
                config[section].append(line)
    listed = {src for s in SOURCE_SECTIONS for src in config.get(s, [])}
    missing = sorted(src for src in listed if not os.path.isfile(os.path.join(ROOT, src)))
    on_disk = {os.path.relpath(p, ROOT) for ext in ("cpp", "cu")
               for p in glob.glob(os.path.join(ROOT, "csrc", "**", "*." + ext), recursive=True)}
    unlisted = sorted(on_disk - listed)
    if missing or unlisted:
        sys.exit("%s does not match csrc/:%s%s" % (
            path, "".join("\n  listed but missing: " + m for m in missing),
            "".join("\n  on disk but listed in no section: " + u for u in unlisted)))
    return config


JPEG_PROBE = r"""
#include <cstdio>
#include <jpeglib.h>
#if !defined(LIBJPEG_TURBO_VERSION_NUMBER) || LIBJPEG_TURBO_VERSION_NUMBER < 1005000
#error libjpeg-turbo >= 1.5 is needed
#endif
int main() {
  jpeg_decompress_struct c;
  JDIMENSION x = 0, w = 0;
  jpeg_crop_scanline(&c, &x, &w);
  return static_cast<int>(jpeg_skip_scanlines(&c, 0));
}
"""


def resolve_jpeg():
    """Whether libjpeg-turbo >= 1.5 (headers and library) is there: a probe compiled and linked
    with the C++ compiler, as the extension will be. PREFETCH_JPEG=0 opts out, =1 requires it."""
    import subprocess
    import tempfile

    wanted = os.environ.get("PREFETCH_JPEG", "")
    if wanted.lower() in ("0", "false", "no", "off"):
        return False, "off (PREFETCH_JPEG=0)"
    compiler = os.environ.get("CXX", "c++")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "probe.cpp")
        with open(src, "w") as f:
            f.write(JPEG_PROBE)
        try:
            probe = subprocess.run([compiler, src, "-o", os.path.join(tmp, "probe"), "-ljpeg"],
                                   capture_output=True, text=True)
            found, detail = probe.returncode == 0, probe.stderr.strip().splitlines()[:1]
        except OSError as e:
            found, detail = False, [str(e)]
    if found:
        return True, "on (libjpeg-turbo)"
    why = ("libjpeg-turbo >= 1.5 was not found by %s (%s); install it (Debian/Ubuntu: apt install "
           "libjpeg-turbo8-dev or libjpeg62-turbo-dev; conda: conda install libjpeg-turbo)"
           % (compiler, detail[0] if detail else "no detail"))
    if flag("PREFETCH_JPEG"):
        sys.exit("PREFETCH_JPEG=1 but " + why)
    return False, "off: " + why


def sanitizer_flags(mode):
    """PREFETCH_SANITIZE's flags: a mode of csrc/build_config.txt (address, thread) or none."""
    if not mode:
        return []
    if "sanitize_" + mode not in cfg:
        sys.exit("PREFETCH_SANITIZE=%s: not a mode of csrc/build_config.txt (address: ASan + UBSan, "
                 "thread: TSan, or empty)" % mode)
    return cfg["sanitize_" + mode]


cfg = read_build_config()
with_cuda, why = resolve_cuda()
with_jpeg, why_jpeg = resolve_jpeg()
debug = flag("DEBUG")
sanitize = os.environ.get("PREFETCH_SANITIZE", "")
std = "-std=c++" + cfg["standard"][0]
# Given to the compiler and the linker alike (the build's sanitizer runtime is linked in).
sanitize_flags = sanitizer_flags(sanitize)
cxx_flags = (["-O0", "-g"] if debug else ["-O3"]) + [std] + cfg["warnings"] + sanitize_flags
# at::parallel_for is inline: in an OpenMP build of torch it is a `#pragma omp parallel`, which
# without -fopenmp compiles to a serial loop (every CPU op of the extension then ran on one
# thread). Compile only: the GOMP_* calls resolve at load time to the OpenMP runtime torch
# already loaded (its wheels bundle their own libgomp), never to a second one linked here.
if torch.backends.openmp.is_available():
    cxx_flags.append("-fopenmp")
include_dirs = [os.path.join(ROOT, d) for d in cfg["include_core"] + cfg["include_torch"]]

srcs = cfg["core"] + cfg["decode"] + cfg["kernels_cpu"] + cfg["torch"]
jpeg_macros = [("PREFETCH_WITH_JPEG", None)] if with_jpeg else []
jpeg_libraries = ["jpeg"] if with_jpeg else []
if with_cuda:
    srcs += cfg["kernels_cuda"] + cfg["torch_cuda"]
    # No fast-math: CPU and CUDA round alike. The warnings reach nvcc's host compiler.
    nvcc_flags = (["-O0", "-g", "-G"] if debug else ["-O3"]) + [std, "-Xcompiler=" + ",".join(cfg["warnings"])]
    ext = CUDAExtension(
        "prefetch._C",
        srcs,
        include_dirs=include_dirs,
        define_macros=[(d, None) for d in cfg["cuda_defines"]] + jpeg_macros,
        libraries=jpeg_libraries,
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
        extra_link_args=sanitize_flags,
    )
else:
    srcs += cfg["torch_cpu_only"]
    ext = CppExtension(
        "prefetch._C",
        srcs,
        include_dirs=include_dirs,
        define_macros=jpeg_macros,
        libraries=jpeg_libraries,
        extra_compile_args={"cxx": cxx_flags},
        extra_link_args=sanitize_flags,
    )

# Torch's headers become system includes (-isystem, as CMake treats imported targets), so that
# csrc/build_config.txt's warnings report our code, not torch's.
torch_root = os.path.dirname(os.path.abspath(torch.__file__))
torch_includes = [d for d in ext.include_dirs if os.path.abspath(d).startswith(torch_root + os.sep)]
ext.include_dirs = [d for d in ext.include_dirs if d not in torch_includes]
for compiler_flags in ext.extra_compile_args.values():
    compiler_flags += [flag for d in torch_includes for flag in ("-isystem", d)]

print(
    "prefetch build: torch %s | CUDA %s | JPEG %s | TORCH_CUDA_ARCH_LIST=%s | MAX_JOBS=%s | DEBUG=%s%s"
    % (torch.__version__, why, why_jpeg, os.environ.get("TORCH_CUDA_ARCH_LIST", "(torch default)"),
       os.environ.get("MAX_JOBS", "(ninja default)"), int(debug),
       " | sanitizers: " + sanitize if sanitize else ""),
    flush=True,
)

setup(ext_modules=[ext], cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)})
