"""The built extension itself: it uses the process's libstdc++, so its error messages carry their
numbers. The GPU check runs these too (marker gpu_machine): the GPU image's build once linked a
static libstdc++ whose number formatting crashed the process (scripts/shared_libstdcxx.py)."""
import os
import subprocess
import sys

import pytest

import prefetch._C
from tests.helpers import ROOT, run_child

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import shared_libstdcxx  # noqa: E402

pytestmark = pytest.mark.gpu_machine


def test_the_extension_loads_the_shared_libstdcxx():
    own = shared_libstdcxx.has_own_libstdcxx(prefetch._C.__file__)
    if own is None:
        pytest.skip("readelf is not installed")
    assert own is False, "%s links no libstdc++.so: %s" % (
        prefetch._C.__file__, shared_libstdcxx.needed_libraries(prefetch._C.__file__))


def test_error_messages_carry_their_numbers():
    # In a child: with a static libstdc++ the first number formatted killed the process (SIGSEGV).
    out = run_child("""
        import torch
        from prefetch.ops import flip_crop, normalize_flip
        for call in (lambda: flip_crop(torch.zeros(2, 4, 4, dtype=torch.uint8), crop=6, fill=300),
                     lambda: normalize_flip(torch.zeros(1, 1, 1, 1, dtype=torch.uint8).expand(
                         2**41 + 1, 1, 2**21, 1), [0.5], [0.5])):
            try:
                call()
            except RuntimeError as e:
                print(str(e).splitlines()[0])
    """)
    assert out.returncode == 0, "the child died (%d): %s" % (out.returncode, out.stderr[-2000:])
    lines = out.stdout.splitlines()
    assert lines[0] == "fill must be a uint8 value in [0, 255] for uint8 masks, got 300", lines
    assert "[2199023255553, 1, 1, 2097152]" in lines[1] and "(N = 2199023255553)" in lines[1], lines


def _link(tmp_path, *flags):
    src = tmp_path / "probe.cpp"
    src.write_text('#include <sstream>\nstd::string f(long v) { std::ostringstream s; s << v; return s.str(); }\n')
    so = tmp_path / ("probe%d.so" % len(flags))
    subprocess.run(["c++", "-shared", "-fPIC", str(src), "-o", str(so), *flags], check=True,
                   capture_output=True, timeout=120)
    return str(so)


def test_the_check_tells_a_static_copy_from_the_shared_library(tmp_path):
    # What setup.py relies on: a static link is seen, and its link arguments undo it.
    if shared_libstdcxx.needed_libraries(sys.executable) is None:
        pytest.skip("readelf is not installed")
    try:
        static = _link(tmp_path, "-static-libstdc++")
        relinked = _link(tmp_path, "-static-libstdc++", *shared_libstdcxx.SHARED_LINK_ARGS)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip("no C++ compiler that links a static libstdc++ here: %s" % exc)
    assert shared_libstdcxx.has_own_libstdcxx(static) is True
    assert shared_libstdcxx.has_own_libstdcxx(relinked) is False
    assert shared_libstdcxx.has_own_libstdcxx(_link(tmp_path)) is False
