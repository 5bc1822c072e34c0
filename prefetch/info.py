"""What a bug report needs, in one command: ``python -m prefetch.info`` (``--json`` for JSON).

prefetch's version and location, the options its extension was built with (recorded by setup.py
in prefetch/_build_info.json; "unknown" when that file is missing), torch, CUDA, the driver and
the visible devices (from nvidia-smi; CUDA itself is never initialised), the decoder that JPEGs get
on a CUDA device (from what is installed: TorchCodec and torchvision are not imported), the
pinned-memory limit, cores, the CPU kernels' instruction-set build, memory, Python, the OS and the
environment variables that change a build or a run.
Like ``python -m torch.utils.collect_env``.

:func:`report` returns the same as a dict (and prints it unless ``out=None``).
"""
from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import subprocess
import sys
from typing import Optional, Sequence, TextIO

import torch

import prefetch
from prefetch._core.versions import installed_versions
from prefetch.ops import gpu_decoders

UNKNOWN = "unknown"
BUILD_INFO_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_build_info.json")
ENV_VARS = ("TORCH_CUDA_ARCH_LIST", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS",
            "MKL_NUM_THREADS", "MAX_JOBS", "DEBUG", "FORCE_CUDA", "PYTORCH_CUDA_ALLOC_CONF",
            "CUDA_LAUNCH_BLOCKING", "LD_LIBRARY_PATH")
PACKAGES = ("numpy", "pillow", "torchdata", "torchvision", "torchcodec", "lightning", "ray", "matplotlib",
            "nvidia-cuda-nvcc", "cuda-toolkit")


def _cpu_kernel_build():
    try:
        from prefetch.ops.cpu_builds import cpu_kernel_build
        return cpu_kernel_build()
    except Exception as exc:  # noqa: BLE001 - an older extension without the op
        return "%s (%s)" % (UNKNOWN, exc)


def _build_info():
    """setup.py's record of this build, or None when the file is missing or unreadable."""
    try:
        with open(BUILD_INFO_PATH) as f:
            info = json.load(f)
        return info if isinstance(info, dict) else None
    except (OSError, ValueError):
        return None


def _build(recorded):
    rec = recorded or {}
    cuda, jpeg = prefetch.built_with_cuda(), prefetch.built_with_jpeg()
    try:
        jpeg_library = str(torch.ops.prefetch._jpeg_decoder_library())
    except Exception as exc:  # an older extension without the op
        jpeg_library = "%s (%s)" % (UNKNOWN, exc)
    build = {
        "info_file": BUILD_INFO_PATH if recorded is not None else "%s (%s is missing)" % (UNKNOWN, BUILD_INFO_PATH),
        "cuda": cuda,
        "cuda_why": rec.get("cuda_why", UNKNOWN),
        "cuda_home": rec.get("cuda_home", UNKNOWN),
        "nvcc_version": rec.get("nvcc_version", UNKNOWN),
        "arch_list": rec.get("arch_list", UNKNOWN),
        "arch_list_source": rec.get("arch_list_source", UNKNOWN),
        "jpeg": jpeg,
        "jpeg_why": rec.get("jpeg_why", UNKNOWN),
        "jpeg_library": jpeg_library,
        "sanitize": rec.get("sanitize", UNKNOWN) if recorded is not None else UNKNOWN,
        "debug": rec.get("debug", UNKNOWN),
        "libstdcxx": rec.get("libstdcxx", UNKNOWN),
        "built_against_torch": rec.get("torch", UNKNOWN),
        "built_at": rec.get("built_at", UNKNOWN),
        "extension": getattr(prefetch._C, "__file__", UNKNOWN),
    }
    # The loaded extension is the truth; a record that disagrees belongs to another build.
    problems = []
    if recorded is not None:
        for key, actual in (("cuda", cuda), ("jpeg", jpeg)):
            if key in rec and bool(rec[key]) != actual:
                problems.append("the record says %s=%s, the loaded extension %s" % (key, rec[key], actual))
        if rec.get("torch") not in (None, torch.__version__):
            problems.append("built against torch %s, running %s" % (rec["torch"], torch.__version__))
    build["consistent"] = not problems if recorded is not None else UNKNOWN
    build["problems"] = problems
    return build


def _nvidia_smi():
    """(driver version, [device dicts]) from nvidia-smi, or (None, None) without it."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None, None
    try:
        out = subprocess.run([smi, "--query-gpu=index,name,driver_version,memory.total,compute_cap",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return "%s (nvidia-smi: %s)" % (UNKNOWN, exc), []
    if out.returncode != 0:
        return "%s (nvidia-smi: %s)" % (UNKNOWN, (out.stderr or out.stdout).strip()[:200]), []
    devices, driver = [], None
    for line in out.stdout.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 5:
            driver = fields[2]
            devices.append({"index": fields[0], "name": fields[1], "memory": fields[3], "compute_capability": fields[4]})
    return driver, devices


def _cuda():
    driver, devices = _nvidia_smi()
    if driver is None:
        try:
            with open("/proc/driver/nvidia/version") as f:
                driver = f.readline().strip()
        except OSError:
            driver = "none (no nvidia-smi, no /proc/driver/nvidia)"
    # Neither call creates a CUDA context; without a driver both say no device, without raising.
    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    if devices is None:
        devices = []
        if available:  # a GPU without nvidia-smi: ask torch (this initialises CUDA)
            for i in range(count):
                p = torch.cuda.get_device_properties(i)
                devices.append({"index": str(i), "name": p.name, "memory": "%d MiB" % (p.total_memory >> 20),
                                "compute_capability": "%d.%d" % (p.major, p.minor)})
    return {
        "torch_cuda": torch.version.cuda,
        "available": available,
        "device_count": count,
        "devices": devices,
        "driver": driver,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "gpu_jpeg_decoder": _gpu_jpeg_decoder(),
    }


def _gpu_jpeg_decoder():
    """What prefetch.ops.decode_jpeg uses on a CUDA device, from what is installed (no import of
    TorchCodec or torchvision, which would load their CUDA libraries)."""
    try:
        return gpu_decoders.describe()
    except Exception as exc:  # noqa: BLE001 - a report never fails on one field
        return "%s (%s: %s)" % (UNKNOWN, type(exc).__name__, exc)


def _limit(value):
    return "unlimited" if value == resource.RLIM_INFINITY else "%d KiB" % (value // 1024)


def _host():
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    quota = None
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            q, period = f.read().split()
            quota = "unlimited" if q == "max" else "%.2f cores" % (int(q) / int(period))
    except (OSError, ValueError):
        pass
    memory = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    memory = "%.1f GiB" % (int(line.split()[1]) / 2 ** 20)
    except (OSError, ValueError):
        pass
    shm = None
    try:
        st = os.statvfs("/dev/shm")
        shm = "%.1f GiB" % (st.f_frsize * st.f_blocks / 2 ** 30)
    except OSError:
        pass
    return {
        "pinned_memory_limit": {"soft": _limit(soft), "hard": _limit(hard)},
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "cgroup_cpu_quota": quota,
        "memory": memory,
        "shm": shm,
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_interop_threads": torch.get_num_interop_threads(),
        "torch_openmp": torch.backends.openmp.is_available(),
        "cpu_kernel_build": _cpu_kernel_build(),
    }


def collect() -> dict:
    """Everything :func:`report` prints, nothing printed. It never initialises CUDA when
    nvidia-smi answers, and never imports TorchCodec or torchvision.

    Returns:
        dict: sections ``prefetch``, ``build``, ``torch``, ``cuda``, ``host``, ``python``,
        ``os``, ``env``, ``env_prefetch`` and ``packages``, each a dict of strings, numbers,
        bools or None (JSON-serialisable).
    """
    recorded = _build_info()
    return {
        "prefetch": {"version": prefetch.__version__,
                     "location": os.path.dirname(os.path.abspath(prefetch.__file__))},
        "build": _build(recorded),
        "torch": {"version": torch.__version__, "location": os.path.dirname(os.path.abspath(torch.__file__)),
                  "debug": torch.version.debug, "git": getattr(torch.version, "git_version", UNKNOWN)},
        "cuda": _cuda(),
        "host": _host(),
        "python": {"version": sys.version.split()[0], "executable": sys.executable},
        "os": {"platform": platform.platform(), "libc": " ".join(platform.libc_ver()).strip() or UNKNOWN,
               "machine": platform.machine()},
        "env": {name: os.environ.get(name) for name in ENV_VARS},
        "env_prefetch": {k: v for k, v in sorted(os.environ.items()) if k.startswith("PREFETCH_")},
        "packages": installed_versions(PACKAGES),
    }


def _show(value):
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def format_report(info: dict) -> str:
    """The human-readable text of a report.

    Args:
        info (dict): what :func:`collect` returned.

    Returns:
        str: the report, lines ending with a newline.

    Raises:
        KeyError: ``info`` lacks a section or field :func:`collect` writes.
    """
    b, c, h = info["build"], info["cuda"], info["host"]
    lines = [
        "prefetch %s at %s" % (info["prefetch"]["version"], info["prefetch"]["location"]),
        "",
        "Build (%s)" % b["info_file"],
        "  extension:        %s" % b["extension"],
        "  CUDA:             %s  %s" % (_show(b["cuda"]), b["cuda_why"]),
        "  CUDA_HOME / nvcc: %s / %s" % (_show(b["cuda_home"]), _show(b["nvcc_version"])),
        "  arch list:        %s  (%s)" % (_show(b["arch_list"]), _show(b["arch_list_source"])),
        "  JPEG decoder:     %s  %s; library: %s" % (_show(b["jpeg"]), b["jpeg_why"], b["jpeg_library"]),
        "  sanitizers:       %s" % ("none" if b["sanitize"] is None else b["sanitize"]),
        "  DEBUG:            %s" % _show(b["debug"]),
        "  libstdc++:        %s" % _show(b["libstdcxx"]),
        "  built against:    torch %s at %s" % (b["built_against_torch"], b["built_at"]),
    ]
    lines += ["  WARNING: %s" % p for p in b["problems"]]
    lines += [
        "",
        "torch %s at %s (CUDA %s)" % (info["torch"]["version"], info["torch"]["location"],
                                      _show(c["torch_cuda"])),
        "CUDA: available %s, %d device(s); driver %s; CUDA_VISIBLE_DEVICES=%s"
        % (_show(c["available"]), c["device_count"], _show(c["driver"]), _show(c["cuda_visible_devices"])),
    ]
    lines += ["  GPU %s: %s, %s, compute capability %s" % (d["index"], d["name"], d["memory"], d["compute_capability"])
              for d in c["devices"]]
    lines += ["  GPU JPEG decoder: %s" % c["gpu_jpeg_decoder"]]
    lines += [
        "",
        "Host",
        "  pinned-memory limit (ulimit -l): soft %s, hard %s"
        % (h["pinned_memory_limit"]["soft"], h["pinned_memory_limit"]["hard"]),
        "  cores: %s (os.cpu_count), %s usable (sched_getaffinity), cgroup quota %s"
        % (_show(h["cpu_count"]), _show(h["cpu_affinity"]), _show(h["cgroup_cpu_quota"])),
        "  memory %s, /dev/shm %s" % (_show(h["memory"]), _show(h["shm"])),
        "  torch threads: %d intra-op, %d inter-op, OpenMP %s"
        % (h["torch_num_threads"], h["torch_num_interop_threads"], _show(h["torch_openmp"])),
        "  prefetch's CPU kernels: %s build" % _show(h["cpu_kernel_build"]),
        "Python %s (%s)" % (info["python"]["version"], info["python"]["executable"]),
        "OS: %s (%s, %s)" % (info["os"]["platform"], info["os"]["machine"], info["os"]["libc"]),
        "",
        "Environment",
    ]
    lines += ["  %s=%s" % (k, _show(v)) for k, v in list(info["env"].items()) + list(info["env_prefetch"].items())]
    lines += ["", "Packages"]
    lines += ["  %s %s" % (k, v or "not installed") for k, v in info["packages"].items()]
    return "\n".join(lines) + "\n"


def report(out: Optional[TextIO] = sys.stdout) -> dict:
    """Collects what a bug report needs, prints it and returns it.

    Args:
        out (file, optional): where the text goes (default ``sys.stdout``); None prints nothing.

    Returns:
        dict: :func:`collect`'s sections: prefetch, build (``cuda``/``jpeg`` as the loaded
        extension says, the rest as setup.py recorded it, ``"unknown"`` without its record),
        torch, cuda, host, python, os, env, packages.
    """
    info = collect()
    if out is not None:
        out.write(format_report(info))
        out.flush()
    return info


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m prefetch.info [--json]``.

    Args:
        argv (sequence of str, optional): the arguments (default ``sys.argv[1:]``).

    Returns:
        int: the exit status, 0.

    Raises:
        SystemExit: an unknown argument (argparse's usage error, status 2) or ``--help``.
    """
    import argparse

    parser = argparse.ArgumentParser(prog="python -m prefetch.info", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if args.json:
        json.dump(collect(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
