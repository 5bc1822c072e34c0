"""Whether a built extension uses the process's libstdc++ or carries a copy of its own.

An extension linked with its own static libstdc++ shares the process's locale (torch and Python
load the shared libstdc++) but keeps its own facet ids, so its streams look facets up at the
wrong index: every number that a TORCH_CHECK message formats came out empty (GCC 12, as on CI) or
crashed the process with SIGSEGV inside ostream::_M_insert<long> (the GPU image of 2026-11-27:
GCC 13.3, libstdc++ 6.0.33; an overflowing output size, a bad fill value, any message with a
number). setup.py checks the extension it linked with :func:`has_own_libstdcxx` and, where the
linker chose the static archive, links it again with :data:`SHARED_LINK_ARGS`, which resolves
every libstdc++ symbol from the shared library before the archive is searched.
"""
import shutil
import subprocess

SHARED_LINK_ARGS = ["-l:libstdc++.so.6"]


def needed_libraries(path):
    """The DT_NEEDED entries of the ELF file `path` (readelf -d), or None when readelf is not
    installed or cannot read it."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return None
    try:
        out = subprocess.run([readelf, "-d", path], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return [line.rsplit("[", 1)[1].rstrip("]") for line in out.stdout.splitlines()
            if "(NEEDED)" in line and "[" in line]


def has_own_libstdcxx(path):
    """True when the C++ library `path` does not load the shared libstdc++ (so the linker put the
    static archive's copy in it), False when it does, None when that cannot be read here."""
    needed = needed_libraries(path)
    if needed is None:
        return None
    return not any(name.startswith(("libstdc++.so", "libc++.so")) for name in needed)
