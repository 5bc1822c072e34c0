"""The examples the docs point to must run."""
import os
import subprocess
import sys

from ..helpers import ROOT


def test_custom_op_example_builds_and_passes_opcheck(tmp_path):
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "custom_op", "run.py")],
                         capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "posterize ok on cpu" in out.stdout
