"""The test helpers that diagnose a crash on a machine we rarely get (tests/helpers.py)."""
import shutil

import pytest

from .conftest import SANITIZED
from .helpers import native_backtrace, run_child

CRASH = """
    import ctypes
    ctypes.string_at(0)
"""


@pytest.mark.skipif(not (shutil.which("cuda-gdb") or shutil.which("gdb")), reason="no debugger")
@pytest.mark.skipif(SANITIZED, reason="ASan turns the SIGSEGV into its own report and exit 1")
def test_native_backtrace_shows_where_a_child_died_of_a_signal():
    out = run_child(CRASH, timeout=60)
    assert out.returncode < 0  # the signal, not an exception
    trace = native_backtrace(CRASH, timeout=60)
    assert "backtrace ---" in trace and "SIGSEGV" in trace and "#0" in trace, trace
