"""What this machine has, before anything runs: gpu_check.sh's first stage.

    python benchmarks/gpu/preflight.py --out DIR [--cpu]

Writes DIR/preflight.json and DIR/preflight.txt (and prints the text): Python, torch and its CUDA,
the GPUs and the driver (nvidia-smi), nvcc, compute-sanitizer, ncu, cmake, ninja, the Python
packages the stages use (looked up, not imported), whether prefetch imports and how it was
built, the pinned-memory limit (ulimit -l), /dev/shm, cores and memory; then the mode (gpu when
torch sees a GPU and --cpu was not given) and, per stage, what it will have to skip. Nothing is
fetched or installed; every probe has a time limit. Exit 0 whatever is missing.
"""
import datetime
import importlib.util
import json
import os
import platform
import resource
import shutil
import subprocess
import sys

import _common  # noqa: F401  (puts the checkout's prefetch first on sys.path)
from _common import ROOT, write_json

PACKAGES = ("pytest", "pytest-timeout", "pytest-xdist", "hypothesis", "ninja", "setuptools",
            "wheel", "pybind11", "numpy", "pillow", "timm", "torchvision", "lightning",
            "matplotlib", "nvidia-ml-py", "psutil", "torchcodec", "ray", "nvidia-dali-cuda130",
            "torchdata")


def probe(cmd, timeout=20):
    """(first useful output line(s), None) or (None, why)."""
    exe = shutil.which(cmd[0])
    if exe is None:
        return None, "not found on PATH"
    try:
        p = subprocess.run([exe] + cmd[1:], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "%s did not answer in %d s" % (cmd[0], timeout)
    except OSError as exc:
        return None, str(exc)
    text = (p.stdout or p.stderr).strip()
    if p.returncode != 0:
        return None, "exit status %d: %s" % (p.returncode, text[-300:])
    return text, None


def version_line(text):
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "release" in line or "version" in line.lower():
            return line
    return lines[0] if lines else text


def tools():
    out = {}
    for name, cmd in (("nvcc", ["nvcc", "--version"]),
                      ("compute-sanitizer", ["compute-sanitizer", "--version"]),
                      ("ncu", ["ncu", "--version"]), ("cmake", ["cmake", "--version"]),
                      ("ninja", ["ninja", "--version"]), ("torchrun", ["torchrun", "--help"]),
                      ("gcc", ["gcc", "--version"])):
        text, why = probe(cmd)
        out[name] = {"present": text is not None,
                     "version": (version_line(text) if name != "torchrun" else shutil.which("torchrun"))
                     if text is not None else None, "why": why}
    out["apt-get"] = {"present": shutil.which("apt-get") is not None,
                      "note": "never called by gpu_check.sh (offline machine)"}
    return out


def gpus():
    text, why = probe(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total,uuid",
                       "--format=csv,noheader"])
    if text is None:
        return {"nvidia_smi": why, "devices": [], "driver": None}
    devices = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 5:
            devices.append({"index": parts[0], "name": parts[1], "driver": parts[2],
                            "memory": parts[3], "uuid": parts[4]})
    return {"nvidia_smi": "ok", "devices": devices,
            "driver": devices[0]["driver"] if devices else None}


def packages():
    # prefetch's own helper, loaded by path: this runs before prefetch is built.
    spec = importlib.util.spec_from_file_location(
        "prefetch_versions", os.path.join(ROOT, "prefetch", "_core", "versions.py"))
    versions = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(versions)
    return versions.installed_versions(PACKAGES)


def torch_info():
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - no torch: everything else still reported
        return {"importable": False, "why": "%s: %s" % (type(exc).__name__, exc)}
    info = {"importable": True, "version": torch.__version__, "cuda": torch.version.cuda,
            "path": os.path.dirname(torch.__file__)}
    try:
        info["cuda_available"] = torch.cuda.is_available()
        info["device_count"] = torch.cuda.device_count()
        info["devices"] = []
        for i in range(info["device_count"]):
            p = torch.cuda.get_device_properties(i)
            info["devices"].append({"index": i, "name": p.name, "capability": "%d.%d" % (p.major, p.minor),
                                    "memory_gib": round(p.total_memory / 2 ** 30, 1),
                                    "multiprocessors": p.multi_processor_count})
    except Exception as exc:  # noqa: BLE001 - a broken driver: the mode falls back to cpu
        info["cuda_available"], info["device_count"] = False, 0
        info["cuda_error"] = "%s: %s" % (type(exc).__name__, exc)
    return info


def prefetch_info():
    try:
        import prefetch
    except Exception as exc:  # noqa: BLE001 - not built yet on a fresh machine
        return {"importable": False, "why": "%s: %s" % (type(exc).__name__, str(exc)[:500])}
    info = {"importable": True, "version": prefetch.__version__, "path": os.path.dirname(prefetch.__file__),
            "built_with_cuda": prefetch.built_with_cuda(), "built_with_jpeg": prefetch.built_with_jpeg()}
    try:
        with open(os.path.join(info["path"], "_build_info.json")) as f:
            build = json.load(f)
        info["build"] = {k: build.get(k) for k in ("cuda", "cuda_why", "arch_list", "nvcc_version",
                                                   "jpeg", "jpeg_why") if k in build}
    except (OSError, ValueError) as exc:
        info["build"] = "no build record (%s)" % exc
    return info


def host():
    out = {"cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    fmt = lambda v: "unlimited" if v == resource.RLIM_INFINITY else "%d KiB" % (v // 1024)  # noqa: E731
    out["ulimit_l"] = {"soft": fmt(soft), "hard": fmt(hard)}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    out["memory_gib"] = round(int(line.split()[1]) / 2 ** 20, 1)
    except OSError:
        pass
    for path in ("/dev/shm", ROOT):
        try:
            st = os.statvfs(path)
            out["free_gib " + path] = round(st.f_bavail * st.f_frsize / 2 ** 30, 1)
        except OSError:
            pass
    out["gtest_headers"] = any(os.path.exists(p) for p in ("/usr/include/gtest/gtest.h",
                                                            "/usr/local/include/gtest/gtest.h"))
    out["jpeglib_h"] = os.path.exists("/usr/include/jpeglib.h")
    out["kernel"] = platform.release()
    out["machine"] = platform.machine()
    return out


def decide(report, force_cpu):
    t = report["torch"]
    if force_cpu:
        return "cpu", "--cpu given"
    if not t.get("importable"):
        return "cpu", "torch does not import"
    if t.get("device_count", 0) < 1:
        return "cpu", "torch sees no GPU (cuda %s, available %s%s)" % (
            t.get("cuda"), t.get("cuda_available"),
            ", %s" % t["cuda_error"] if "cuda_error" in t else "")
    return "gpu", "%d GPU(s): %s" % (t["device_count"], ", ".join(d["name"] for d in t["devices"]))


def limits(report):
    """Per stage: what it will skip on this machine (empty when nothing)."""
    tl, pk, mode = report["tools"], report["packages"], report["mode"]
    out = {}
    if mode == "gpu":
        if not tl["nvcc"]["present"]:
            out["build"] = "no nvcc: the extension cannot be built with CUDA"
        if not tl["compute-sanitizer"]["present"]:
            out["sanitize"] = out["sanitize_changed"] = "no compute-sanitizer"
        if pk["pytest-xdist"] is None:
            # pytest_limits ends a stuck test's process: without xdist to replace it, the run.
            out["tests"] = ("no pytest-xdist: a test past its limit ends the run"
                            if pk["pytest-timeout"] is None else
                            "no pytest-xdist: pytest-timeout's signal bounds a test (not one stuck "
                            "in C with the GIL held)")
        if pk["timm"] is None:
            out["bench"] = out["bench_fair"] = "no timm: e2e has no timm row"
        if report["gpu_count"] < 2:
            out["nccl"] = "one GPU: NCCL refuses two ranks on one device (the stage records its answer)"
    if pk["pytest"] is None:
        out["tests"] = out["suite"] = "no pytest"
    if pk["pillow"] is None:
        out["sanitize_decode"] = "no Pillow: no JPEG to decode"
    if pk["matplotlib"] is None:
        out["bench_charts"] = "no matplotlib: no PNG charts"
    if not report["host"]["gtest_headers"]:
        out["suite_ctest"] = "no GoogleTest headers: the C++ tests are skipped (PREFETCH_SKIP_CTEST=1)"
    return out


def text_report(r):
    t, pf, h = r["torch"], r["prefetch"], r["host"]
    lines = ["gpu_check preflight, %s" % r["date"],
             "mode: %s (%s)" % (r["mode"], r["mode_why"]),
             "python %s (%s)" % (r["python"]["version"], r["python"]["executable"])]
    if t.get("importable"):
        lines.append("torch %s, CUDA %s, available %s, %d device(s)" % (
            t["version"], t["cuda"], t.get("cuda_available"), t.get("device_count", 0)))
        for d in t.get("devices", []):
            lines.append("  cuda:%d %s, sm_%s, %.1f GiB, %d SMs" % (
                d["index"], d["name"], d["capability"].replace(".", ""), d["memory_gib"],
                d["multiprocessors"]))
    else:
        lines.append("torch: %s" % t["why"])
    g = r["gpus"]
    lines.append("nvidia-smi: %s; driver %s; %d GPU(s)%s" % (
        g["nvidia_smi"], g["driver"], len(g["devices"]),
        "".join("\n  %s %s %s" % (d["index"], d["name"], d["memory"]) for d in g["devices"])))
    for name, tool in r["tools"].items():
        if "version" in tool:
            lines.append("%-18s %s" % (name, tool["version"] if tool["present"] else "MISSING (%s)" % tool["why"]))
        else:
            lines.append("%-18s %s (%s)" % (name, "present" if tool["present"] else "absent", tool["note"]))
    lines.append("packages: " + ", ".join("%s %s" % (k, v or "MISSING") for k, v in r["packages"].items()))
    if pf.get("importable"):
        lines.append("prefetch %s at %s: CUDA %s, JPEG %s, build %s" % (
            pf["version"], pf["path"], pf["built_with_cuda"], pf["built_with_jpeg"], pf.get("build")))
    else:
        lines.append("prefetch: does not import yet (%s)" % pf["why"])
    lines.append("host: %s cores, %s GiB, ulimit -l %s (hard %s), /dev/shm free %s GiB, kernel %s, "
                 "gtest headers %s, jpeglib.h %s" % (
                     h["cores"], h.get("memory_gib"), h["ulimit_l"]["soft"], h["ulimit_l"]["hard"],
                     h.get("free_gib /dev/shm"), h["kernel"], h["gtest_headers"], h["jpeglib_h"]))
    for stage, why in r["limits"].items():
        lines.append("will skip in %s: %s" % (stage, why))
    return "\n".join(lines) + "\n"


def collect(force_cpu=False):
    r = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
         "python": {"version": platform.python_version(), "executable": sys.executable},
         "torch": torch_info(), "gpus": gpus(), "tools": tools(), "packages": packages(),
         "prefetch": prefetch_info(), "host": host()}
    r["mode"], r["mode_why"] = decide(r, force_cpu)
    r["gpu_count"] = r["torch"].get("device_count", 0) if r["mode"] == "gpu" else 0
    r["limits"] = limits(r)
    return r


def main(argv=None):
    p = _common.parser(__doc__)
    p.add_argument("--out", default=".", help="folder for preflight.json and preflight.txt")
    p.add_argument("--cpu", action="store_true", help="CPU mode even when a GPU is visible")
    args = p.parse_args(argv)
    r = collect(args.cpu)
    write_json(os.path.join(args.out, "preflight.json"), r)
    text = text_report(r)
    with open(os.path.join(args.out, "preflight.txt"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
