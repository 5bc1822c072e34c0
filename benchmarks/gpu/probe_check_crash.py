"""Where does the output-size check die on the GPU machine? A probe for one unexplained crash.

On the H200 runs of 2026-11-27, tests/ops/test_augment_arguments.py::
test_output_size_overflow_and_fill_range_on_cuda died of SIGSEGV inside ostream::_M_insert<long>
while TORCH_CHECK formatted the sizes in checked_output_bytes; here (GCC 12, CPU torch) the same
call raises. This runs each neighbour of that call in its own child, on the CPU and on the GPU,
and prints which die, the native stack of each that does (cuda-gdb), and the toolchain facts that
could explain it (compilers, the libstdc++ the process maps, the extension's own copies of the
stream code). Output: a plain-text report on stdout.

    python benchmarks/gpu/probe_check_crash.py [--device cpu]      # cpu: the CPU cases only (CI)
"""
import os
import shutil
import subprocess
import sys
import textwrap

import _common
from _common import ROOT

PRELUDE = """
import faulthandler, torch
faulthandler.enable()
from prefetch.ops import normalize_flip, flip_crop
"""

# name -> (needs CUDA, body). Each prints "raised: <first line>" when its call raises.
CASES = {
    "normalize_flip overflow, cpu": (False, """
        x = torch.zeros(1, 1, 1, 1, dtype=torch.uint8).expand(2**41 + 1, 1, 2**21, 1)
        try: normalize_flip(x, [0.5], [0.5])
        except RuntimeError as e: print("raised:", str(e).splitlines()[0])
    """),
    "int formatted in a check, cpu": (False, """
        try: flip_crop(torch.zeros(2, 4, 4, dtype=torch.uint8), crop=6, fill=300)
        except RuntimeError as e: print("raised:", str(e).splitlines()[0])
    """),
    "int formatted in a check, cuda": (True, """
        try: flip_crop(torch.zeros(2, 4, 4, dtype=torch.uint8, device="cuda"), crop=6, fill=300)
        except RuntimeError as e: print("raised:", str(e).splitlines()[0])
    """),
    "device formatted in a check, cuda": (True, """
        x = torch.zeros(2, 3, 4, 4, dtype=torch.uint8, device="cuda")
        try: normalize_flip(x, [0.5] * 3, [0.5] * 3, hflip=torch.zeros(2, dtype=torch.bool))
        except RuntimeError as e: print("raised:", str(e).splitlines()[0])
    """),
    "small sizes overflow-free, cuda": (True, """
        x = torch.zeros(1, 1, 1, 1, dtype=torch.uint8, device="cuda").expand(2**16, 1, 2**10, 1)
        try: print("ok", tuple(normalize_flip(x, [0.5], [0.5]).shape))
        except RuntimeError as e: print("raised:", str(e).splitlines()[0])
    """),
    "normalize_flip overflow, cuda": (True, """
        x = torch.zeros(1, 1, 1, 1, dtype=torch.uint8, device="cuda").expand(2**41 + 1, 1, 2**21, 1)
        try: normalize_flip(x, [0.5], [0.5])
        except RuntimeError as e: print("raised:", str(e).splitlines()[0])
    """),
    "flip_crop overflow, cuda": (True, """
        m = torch.zeros(1, 1, 1, dtype=torch.int64, device="cuda").expand(2**32 + 1, 1, 1)
        try: flip_crop(m, crop=65535)
        except RuntimeError as e: print("raised:", str(e).splitlines()[0])
    """),
    "normalize_flip overflow, cpu, after CUDA initialised": (True, """
        torch.zeros(1, device="cuda")
        x = torch.zeros(1, 1, 1, 1, dtype=torch.uint8).expand(2**41 + 1, 1, 2**21, 1)
        try: normalize_flip(x, [0.5], [0.5])
        except RuntimeError as e: print("raised:", str(e).splitlines()[0])
    """),
}


def run(args, timeout=90):
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=ROOT))
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", "timed out after %d s" % timeout
    except OSError as exc:
        return None, "", str(exc)


def toolchain():
    import torch
    import prefetch._C as ext

    so = ext.__file__
    lines = ["torch %s, CUDA %s, extension %s" % (torch.__version__, torch.version.cuda, so)]
    config = torch.__config__.show()
    lines += [l.strip() for l in config.splitlines() if "compiler" in l.lower() or "CXX" in l][:4]
    for cmd in (["gcc", "--version"], ["c++", "--version"]):
        rc, out, _ = run(cmd, timeout=10)
        lines.append("%s: %s" % (" ".join(cmd), out.splitlines()[0] if out else "rc %s" % rc))
    for name in ("libstdc++.so", "libstdc++.a"):
        rc, out, _ = run(["c++", "-print-file-name=" + name], timeout=10)
        lines.append("c++ -print-file-name=%s: %s" % (name, out.strip()))
    import sysconfig
    lines.append("sysconfig LDSHARED=%r LDCXXSHARED=%r" % (sysconfig.get_config_var("LDSHARED"),
                                                          sysconfig.get_config_var("LDCXXSHARED")))
    lines.append("env: %s" % {k: os.environ.get(k) for k in ("LDFLAGS", "CXXFLAGS", "CFLAGS", "CXX", "CC")})
    info = os.path.join(os.path.dirname(so), "_build_info.json")
    if os.path.exists(info):
        with open(info) as f:
            lines.append("_build_info.json libstdcxx: %s" % __import__("json").load(f).get("libstdcxx"))
    rc, out, _ = run(["readelf", "-p", ".comment", so], timeout=20)
    lines.append("extension .comment: " + " | ".join(l.strip() for l in out.splitlines()[2:6]))
    rc, out, _ = run(["ldd", so], timeout=20)
    lines += ["ldd: " + l.strip() for l in out.splitlines() if "stdc++" in l or "gcc_s" in l]
    with open("/proc/self/maps") as f:
        maps = sorted({l.split()[-1] for l in f if "libstdc++" in l})
    lines.append("libstdc++ mapped by this process: %s" % maps)
    for lib in maps:
        rc, out, _ = run(["strings", lib], timeout=20)
        glibcxx = sorted({l for l in out.splitlines() if l.startswith("GLIBCXX_3.4.")},
                         key=lambda v: int(v.rsplit(".", 1)[1]))
        lines.append("  %s newest: %s" % (lib, glibcxx[-3:]))
    rc, out, _ = run(["nm", "-C", "--defined-only", so], timeout=60)
    stream = [l for l in out.splitlines() if "_M_insert<" in l or "num_put" in l
              or "ostream" in l][:20]
    lines.append("extension's own stream code (nm -C --defined-only, first 20):")
    lines += ["  " + l[:200] for l in stream] or ["  (none; nm rc %s)" % rc]
    return lines


def backtrace(body):
    debugger = shutil.which("cuda-gdb") or shutil.which("gdb")
    if debugger is None:
        return "(no cuda-gdb or gdb)"
    code = textwrap.dedent(PRELUDE) + textwrap.dedent(body)
    rc, out, err = run([debugger, "-batch", "-ex", "run", "-ex", "bt 30", "-ex", "info registers rip",
                        "-ex", "x/6i $pc", "-ex", "info symbol $pc", "--args", sys.executable, "-c",
                        code], timeout=150)
    keep = [l[:300] for l in out.splitlines()
            if l.startswith(("#", "=>", "rip", "   0x")) or "signal" in l.lower() or " in section " in l]
    return "\n".join(keep)[-8000:] or err[-2000:]


def main(argv=None):
    p = _common.parser(__doc__)
    _common.device_argument(p)
    args = p.parse_args(argv)
    import torch

    cuda = args.device != "cpu" and torch.cuda.is_available()
    print("\n".join(toolchain()))
    for name, (needs_cuda, body) in CASES.items():
        if needs_cuda and not cuda:
            print("\n== %s: skipped (no GPU)" % name)
            continue
        rc, out, err = run([sys.executable, "-c", textwrap.dedent(PRELUDE) + textwrap.dedent(body)])
        print("\n== %s: rc %s\n%s" % (name, rc, (out.strip() or err.strip())[-1500:]))
        if rc is not None and rc < 0:
            print("-- native stack --\n" + backtrace(body))
    return 0


if __name__ == "__main__":
    sys.exit(main())
