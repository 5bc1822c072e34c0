"""NVIDIA's CUDA compiler from the package index, for a CUDA build of torch without a CUDA toolkit.

torch's CUDA wheels bring the CUDA runtime libraries (and, from CUDA 13, its headers) but no
`nvcc`. NVIDIA publishes the compiler as wheels too (nvidia-cuda-nvcc, with nvidia-cuda-crt,
nvidia-nvvm and nvidia-cuda-cccl), which install into site-packages/nvidia/cu<major>/ next to the
runtime: bin/nvcc, include/, lib/, nvvm/ — the layout of a toolkit, usable as CUDA_HOME.

setup.py imports this file (it looks for a pip-installed nvcc when no toolkit is found, and names
the command that installs one); scripts/install.sh runs it:

    python scripts/cuda_from_pip.py     prints the requirements to install (one per line) when torch
                                        is a CUDA build and no usable nvcc is found; nothing when
                                        none is needed; exits 2 when it cannot name any (CUDA < 13)

Only the standard library and torch: it runs before prefetch is built.
"""
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys

# cuda-toolkit's extras (NVIDIA's meta-package, which torch's CUDA 13 wheels depend on): the
# compiler, its device-side headers, the NVVM backend, CCCL (cub/thrust/libcu++), the runtime.
TOOLKIT_EXTRAS = ("nvcc", "crt", "nvvm", "cccl", "cudart")
WHEELS = ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl", "nvidia-cuda-runtime")


def nvcc_version(nvcc):
    """(major, minor) of an nvcc binary, or None when it does not run."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def system_nvcc(cuda_home):
    """The nvcc torch.utils.cpp_extension would use (PATH, then CUDA_HOME/bin), if it exists."""
    nvcc = shutil.which("nvcc") or (cuda_home and os.path.join(cuda_home, "bin", "nvcc"))
    return nvcc if nvcc and os.path.isfile(nvcc) and os.access(nvcc, os.X_OK) else None


def find_home(torch_cuda):
    """site-packages/nvidia/cu<major> when a pip-installed nvcc of torch's CUDA major is there."""
    major = torch_cuda.split(".")[0]
    for entry in sys.path:
        home = os.path.join(entry or ".", "nvidia", "cu" + major)
        nvcc = os.path.join(home, "bin", "nvcc")
        if os.path.isfile(nvcc) and os.access(nvcc, os.X_OK):
            return os.path.abspath(home)
    return None


def requirements(torch_cuda):
    """The pip requirements of an nvcc matching torch's CUDA version, or None (CUDA < 13, whose
    wheels have another layout: install a toolkit)."""
    major, minor = (int(x) for x in torch_cuda.split(".")[:2])
    if major < 13:
        return None
    try:
        toolkit = importlib.metadata.version("cuda-toolkit")
    except importlib.metadata.PackageNotFoundError:
        toolkit = None
    if toolkit and tuple(int(x) for x in toolkit.split(".")[:2]) == (major, minor):
        # The exact release torch was installed with.
        return ["cuda-toolkit[%s]==%s" % (",".join(TOOLKIT_EXTRAS), toolkit)]
    return ["%s==%d.%d.*" % (w, major, minor) for w in WHEELS]


def install_command(python, torch_cuda):
    reqs = requirements(torch_cuda)
    if reqs is None:
        return None
    return "%s -m pip install %s" % (python, " ".join("'%s'" % r for r in reqs))


def cudart_link_dir(home, build_dir):
    """The pip runtime ships lib/libcudart.so.<major> without the libcudart.so that `-lcudart`
    links against: a directory under build_dir with that link, or None when home has one."""
    libs = [os.path.join(home, d) for d in ("lib64", "lib") if os.path.isdir(os.path.join(home, d))]
    if any(os.path.exists(os.path.join(d, "libcudart.so")) for d in libs):
        return None
    versioned = sorted(os.path.join(d, f) for d in libs for f in os.listdir(d)
                       if re.fullmatch(r"libcudart\.so\.\d+", f))
    if not versioned:
        return None
    link_dir = os.path.join(build_dir, "cudart-link")
    os.makedirs(link_dir, exist_ok=True)
    link = os.path.join(link_dir, "libcudart.so")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(versioned[-1], link)
    return link_dir


def main():
    import torch
    from torch.utils.cpp_extension import CUDA_HOME

    if torch.version.cuda is None:
        return 0
    major = int(torch.version.cuda.split(".")[0])
    nvcc = system_nvcc(CUDA_HOME)
    if nvcc and (nvcc_version(nvcc) or (major,))[0] == major:
        return 0
    if find_home(torch.version.cuda):
        return 0
    reqs = requirements(torch.version.cuda)
    if reqs is None:
        print("torch %s is a CUDA %s build and no nvcc of CUDA %d was found; NVIDIA's CUDA < 13 "
              "compiler wheels are not handled here: install a CUDA %s toolkit and set CUDA_HOME"
              % (torch.__version__, torch.version.cuda, major, torch.version.cuda), file=sys.stderr)
        return 2
    print("\n".join(reqs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
