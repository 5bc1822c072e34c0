"""examples/ssl/train_ssl.py runs both loops on the CPU from JPEG files it writes: DINO's
multi-crop (a student and an EMA teacher) and SimCLR's two views, each batch's views of the sizes
asked for and every loss finite (the script asserts it)."""
import os
import re
import subprocess
import sys

import pytest

import prefetch

from ..helpers import ROOT


def run_example(args, timeout=300):
    tested = os.path.dirname(os.path.dirname(os.path.abspath(prefetch.__file__)))
    path = os.pathsep.join(p for p in (tested, os.environ.get("PYTHONPATH")) if p)
    cmd = [sys.executable, os.path.join(ROOT, "examples", "ssl", "train_ssl.py")] + [str(a) for a in args]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                             env=dict(os.environ, PYTHONPATH=path))
    except subprocess.TimeoutExpired as exc:
        pytest.fail("the example hung; output:\n%s\n%s" % (exc.stdout, exc.stderr))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.rstrip().endswith("done"), out.stdout
    return out.stdout


@pytest.mark.skipif(not prefetch.built_with_jpeg(), reason="built without libjpeg-turbo")
@pytest.mark.parametrize("method, args, views", [
    ("dino", ["--global-size", 40, "--local-size", 20, "--local-crops", 3, "--blur-kernel", 7],
     [(8, 3, 40, 40)] * 2 + [(8, 3, 20, 20)] * 3),
    ("simclr", ["--global-size", 24, "--blur-kernel", 3], [(8, 3, 24, 24)] * 2),
])
def test_the_ssl_example_trains_on_its_views(method, args, views):
    pytest.importorskip("PIL")
    out = run_example(["--method", method, "--make", 24, "--epochs", 2, "--batch-size", 8,
                       "--workers", 1] + args)
    epochs = re.findall(r"epoch (\d): (\d+) batches, .* views (\[.*\])", out)
    assert [(e, n) for e, n, _ in epochs] == [("0", "3"), ("1", "3")], out
    assert all(shapes == str(views) for _, _, shapes in epochs), out
