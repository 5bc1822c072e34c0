"""Builds prefetch._C with torch.utils.cpp_extension (ninja).

What is compiled and with which flags is csrc/build_config.txt, which CMakeLists.txt reads too;
this file only decides which of its sections this build uses. CUDA sources are compiled when the
installed torch is a CUDA build; a visible GPU is never required. nvcc is the toolkit's
torch.utils.cpp_extension finds, else NVIDIA's nvcc wheels in this environment (which
scripts/install.sh installs; scripts/cuda_from_pip.py); a CUDA torch without either stops the
build with the pip command that installs them, rather than dropping CUDA silently.
PREFETCH_FORCE_CPU=1 opts out, FORCE_CUDA=1 insists on CUDA (a CPU torch then fails loudly).
TORCH_CUDA_ARCH_LIST, MAX_JOBS and DEBUG are honoured (without TORCH_CUDA_ARCH_LIST and without a
visible GPU: the architectures torch was built for, the newest also as PTX); PREFETCH_SANITIZE=address|thread
instruments the C++ code (its meaning is written in csrc/build_config.txt; scripts/sanitize.sh
python uses address).
"""
import datetime
import glob
import json
import os
import re
import sys

from setuptools import setup

try:
    import torch
    import torch.utils.cpp_extension as cpp_extension
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension
except ImportError:
    sys.exit(
        "prefetch builds against the installed torch, and none is installed.\n"
        "Install torch first (e.g. pip install torch), then build without isolation:\n"
        "    pip install --no-build-isolation -e ."
    )

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import cuda_from_pip  # noqa: E402  (NVIDIA's nvcc wheels: found, or named in the error)
import shared_libstdcxx  # noqa: E402  (the extension must use the process's libstdc++)


def flag(name):
    return os.environ.get(name, "0").lower() in ("1", "true", "yes", "on")


def resolve_cuda():
    """(on, why). CUDA is on when torch is a CUDA build and an nvcc of its CUDA major version is
    found: the toolkit torch.utils.cpp_extension finds (CUDA_HOME, PATH, /usr/local/cuda), else
    NVIDIA's nvcc wheels in this environment (site-packages/nvidia/cu<major>, which then becomes
    CUDA_HOME). A CUDA torch without either stops the build with the command that installs the
    wheels, instead of dropping CUDA silently (PREFETCH_FORCE_CPU=1 builds without it)."""
    if flag("PREFETCH_FORCE_CPU"):
        return False, "off (PREFETCH_FORCE_CPU=1)"
    torch_cuda = torch.version.cuda
    if torch_cuda is None:
        if flag("FORCE_CUDA"):
            sys.exit("FORCE_CUDA=1 but torch %s is a CPU build; install a CUDA build of torch." % torch.__version__)
        return False, "off (torch %s is a CPU build)" % torch.__version__
    major = int(torch_cuda.split(".")[0])
    nvcc = cuda_from_pip.system_nvcc(cpp_extension.CUDA_HOME)
    nvcc_version = nvcc and cuda_from_pip.nvcc_version(nvcc)
    if nvcc and (not nvcc_version or nvcc_version[0] == major):
        return True, "on (torch CUDA %s, nvcc %s)" % (torch_cuda, nvcc)
    home = cuda_from_pip.find_home(torch_cuda)
    if home:
        cpp_extension.CUDA_HOME = os.environ["CUDA_HOME"] = home
        return True, "on (torch CUDA %s, nvcc %s from NVIDIA's wheels%s)" % (
            torch_cuda, os.path.join(home, "bin", "nvcc"),
            "; %s is CUDA %d.%d" % ((nvcc,) + nvcc_version) if nvcc else "")
    found = ("nvcc %s is CUDA %d.%d" % ((nvcc,) + nvcc_version) if nvcc
             else "no nvcc was found (CUDA_HOME=%s, PATH)" % cpp_extension.CUDA_HOME)
    command = cuda_from_pip.install_command(sys.executable, torch_cuda)
    sys.exit(
        "prefetch build: torch %s is a CUDA %s build but %s, so its CUDA code cannot be compiled.\n"
        "%s"
        "Or install a CUDA %d toolkit and set CUDA_HOME to it; or build without CUDA (its Prefetcher\n"
        "then refuses CUDA devices): PREFETCH_FORCE_CPU=1 pip install --no-build-isolation -e .\n"
        "(bash scripts/install.sh installs NVIDIA's nvcc wheels by itself.)"
        % (torch.__version__, torch_cuda, found,
           "Install NVIDIA's nvcc of the same CUDA version from the package index, then build again:\n"
           "    %s\n" % command if command else "", major))


def resolve_arch_list():
    """(TORCH_CUDA_ARCH_LIST, where it came from). Unset, with no visible GPU, torch would fail
    (IndexError in _get_cuda_arch_flags): the architectures this torch was built for are used,
    with PTX for the newest, and exported for torch's build to read."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"], "TORCH_CUDA_ARCH_LIST"
    if torch.cuda.is_available():  # no CUDA context is created
        caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
        return ";".join("%d.%d" % c for c in caps), "the visible GPUs"
    flags = torch._C._cuda_getArchFlags() if hasattr(torch._C, "_cuda_getArchFlags") else ""
    archs = []
    for f in (flags or "").split():
        m = re.fullmatch(r"sm_(\d+)(\d)([a-z]?)", f)
        if m:
            archs.append((int(m.group(1)), int(m.group(2)), m.group(3)))
    if not archs:
        sys.exit("prefetch build: no GPU is visible and torch %s names no architectures it was built "
                 "for (%r): set TORCH_CUDA_ARCH_LIST, e.g. TORCH_CUDA_ARCH_LIST=9.0" % (torch.__version__, flags))
    archs = sorted(set(archs))
    value = ";".join("%d.%d%s" % a for a in archs) + "+PTX"
    os.environ["TORCH_CUDA_ARCH_LIST"] = value
    return value, "no GPU visible: the architectures torch %s was built for" % torch.__version__


SOURCE_SECTIONS = ("core", "decode", "kernels_cpu", "kernels_cuda", "torch", "torch_cpu_only", "torch_cuda")
SECTIONS = SOURCE_SECTIONS + ("include_core", "include_torch", "standard", "warnings", "cuda_defines",
                              "sanitize_address", "sanitize_thread")


# The ops' own folders, found by their place rather than listed (csrc/build_config.txt's top):
# (folder whose every subfolder but common/ is an op's, section of its C++, section of its CUDA
# sources: .cu files, and .cpp files named *_cuda.cpp).
OP_FOLDERS = (("csrc/kernels", "kernels_cpu", "kernels_cuda"), ("csrc/torch/ops", "torch", "torch_cuda"))


def op_folder_sources():
    """{section: [sources]} of every op's folders, each list sorted."""
    found = {}
    for parent, cpu_section, cuda_section in OP_FOLDERS:
        for folder in sorted(glob.glob(os.path.join(ROOT, parent, "*", ""))):
            if os.path.basename(os.path.dirname(folder)) == "common":
                continue
            for path in sorted(glob.glob(os.path.join(folder, "*.cpp")) + glob.glob(os.path.join(folder, "*.cu"))):
                cuda = path.endswith(".cu") or path.endswith("_cuda.cpp")
                found.setdefault(cuda_section if cuda else cpu_section, []).append(os.path.relpath(path, ROOT))
    return found


def read_build_config(path=os.path.join(ROOT, "csrc", "build_config.txt")):
    """csrc/build_config.txt as {section: [items]} (its format is described at its top), with the
    sources of the ops' folders added to their sections."""
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
    in_op_folders = op_folder_sources()
    found = {src for sources in in_op_folders.values() for src in sources}
    twice = sorted(listed & found)
    on_disk = {os.path.relpath(p, ROOT) for ext in ("cpp", "cu")
               for p in glob.glob(os.path.join(ROOT, "csrc", "**", "*." + ext), recursive=True)}
    unlisted = sorted(on_disk - listed - found)
    if missing or unlisted or twice:
        sys.exit("%s does not match csrc/:%s%s%s" % (
            path, "".join("\n  listed but missing: " + m for m in missing),
            "".join("\n  on disk but listed in no section (and in no op's folder): " + u for u in unlisted),
            "".join("\n  listed, but an op's folder is found without a list: " + t for t in twice)))
    for section, sources in in_op_folders.items():
        config.setdefault(section, []).extend(sources)
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
arch_list, arch_source = resolve_arch_list() if with_cuda else (None, "no CUDA")
with_jpeg, why_jpeg = resolve_jpeg()
debug = flag("DEBUG")
sanitize = os.environ.get("PREFETCH_SANITIZE", "")
std = "-std=c++" + cfg["standard"][0]
# Given to the compiler and the linker alike (the build's sanitizer runtime is linked in).
sanitize_flags = sanitizer_flags(sanitize)
cxx_flags = (["-O0", "-g"] if debug else ["-O3"]) + [std] + cfg["warnings"] + sanitize_flags
if not debug:
    # Python's own CFLAGS carry -g (full debug info): for sources that include torch's and
    # pybind11's headers it was a third of each compile (engine_binding.cpp 37 s against 27,
    # an op file 21 against 13) and most of the extension's 89 MB (17 with -g1). -g1, given
    # last so that it wins over that -g and the sanitizers', keeps the function names and line
    # tables that backtraces, sanitizer reports and perf need, without the types and locals a
    # debugger needs (DEBUG=1 builds keep full -g).
    cxx_flags.append("-g1")
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
    # No fast-math, and no multiply-add contracted into an FMA (--fmad=false): the thread work is
    # shared with the CPU, which contracts nowhere it would change a value (the baseline x86-64
    # build has no FMA; GCC does contract in the FMA builds, which include
    # common/no_contraction.h or round only exact products), so both round each operation alike
    # and write the same bytes; a uint8 stage that differed by one level on the GPU changed whole images further
    # down a policy (Solarize's threshold, Equalize's table: the first GPU run of the v2 recipe).
    # Where an FMA is meant, the code says so (common/round_each.h's fma_rn). The warnings reach
    # nvcc's host compiler.
    nvcc_flags = (["-O0", "-g", "-G"] if debug else ["-O3"]) + [
        std, "--fmad=false", "-Xcompiler=" + ",".join(cfg["warnings"])]
    # NVIDIA's runtime wheel has libcudart.so.<major> but not the libcudart.so -lcudart needs.
    cudart_dir = cuda_from_pip.cudart_link_dir(cpp_extension.CUDA_HOME, os.path.join(ROOT, "build"))
    ext = CUDAExtension(
        "prefetch._C",
        srcs,
        include_dirs=include_dirs,
        library_dirs=[cudart_dir] if cudart_dir else [],
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
    % (torch.__version__, why, why_jpeg,
       "%s (%s)" % (arch_list, arch_source) if with_cuda else "(no CUDA)",
       os.environ.get("MAX_JOBS", "(ninja default)"), int(debug),
       " | sanitizers: " + sanitize if sanitize else ""),
    flush=True,
)

# What this build decided, for `python -m prefetch.info` (prefetch/_build_info.json, written next
# to the extension once it is built; not tracked by git).
nvcc_release = with_cuda and cuda_from_pip.nvcc_version(os.path.join(cpp_extension.CUDA_HOME, "bin", "nvcc"))
BUILD_INFO = {
    "cuda": with_cuda,
    "cuda_why": why,
    "cuda_home": cpp_extension.CUDA_HOME if with_cuda else None,
    "nvcc_version": "%d.%d" % nvcc_release if nvcc_release else None,
    "arch_list": arch_list,
    "arch_list_source": arch_source,
    "jpeg": with_jpeg,
    "jpeg_why": why_jpeg,
    "debug": debug,
    "sanitize": sanitize or None,
    "torch": torch.__version__,
    "torch_cuda": torch.version.cuda,
    "python": sys.version.split()[0],
    "compiler": os.environ.get("CXX", "c++"),
    "max_jobs": os.environ.get("MAX_JOBS"),
}


class BuildExt(BuildExtension.with_options(use_ninja=True)):
    def run(self):
        n_cu = sum(src.endswith(".cu") for src in srcs)
        print("prefetch build: compiling %d C++%s sources with ninja (MAX_JOBS=%s); this takes a minute "
              "or two%s" % (len(srcs) - n_cu, " and %d CUDA" % n_cu if n_cu else "",
                           os.environ.get("MAX_JOBS", "ninja default"),
                           ", CUDA more per architecture (%s)" % arch_list if n_cu else ""), flush=True)
        super().run()
        BUILD_INFO["built_at"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        path = os.path.join(os.path.dirname(self.get_ext_fullpath("prefetch._C")), "_build_info.json")
        with open(path, "w") as f:
            json.dump(BUILD_INFO, f, indent=1, sort_keys=True)
            f.write("\n")
        print("prefetch build: done; build options recorded in %s (python -m prefetch.info)" % path, flush=True)

    def build_extension(self, ext):
        """The extension compiled and linked; where the linker put a static copy of libstdc++ in it
        (its numbers in error messages then crash or vanish: scripts/shared_libstdcxx.py), linked
        again against the shared one. A build that still carries its own copy is refused."""
        super().build_extension(ext)
        so = self.get_ext_fullpath(ext.name)
        own = shared_libstdcxx.has_own_libstdcxx(so)
        BUILD_INFO["libstdcxx"] = {None: "not checked (no readelf)", False: "shared"}.get(own, "static")
        if not own:
            return
        args = shared_libstdcxx.SHARED_LINK_ARGS
        print("prefetch build: the linker put a static copy of libstdc++ in %s; linking it again "
              "with %s" % (so, " ".join(args)), flush=True)
        ext.extra_link_args = list(ext.extra_link_args) + args
        os.remove(so)  # the objects are up to date: only the link runs again
        super().build_extension(ext)
        if shared_libstdcxx.has_own_libstdcxx(so):
            sys.exit("prefetch build: %s still carries its own libstdc++ after linking with %s; its "
                     "error messages would crash. Check LDFLAGS and the compiler's libstdc++.so "
                     "(c++ -print-file-name=libstdc++.so)." % (so, " ".join(args)))
        BUILD_INFO["libstdcxx"] = "shared (linked again with %s)" % " ".join(args)


setup(ext_modules=[ext], cmdclass={"build_ext": BuildExt})
