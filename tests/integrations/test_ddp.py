"""DDP under torchrun (2 CPU ranks over gloo): the example gives each rank disjoint shards that
cover the dataset, with a new order every epoch, through both loaders."""
import json
import os
import subprocess
import sys

import pytest

import prefetch

from ..helpers import ROOT


def run_torchrun(script, args, timeout):
    """Runs examples/<script> with 2 CPU ranks under torchrun; fails the test on a hang or error."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           os.path.join(ROOT, "examples", script)] + [str(a) for a in args]
    # The ranks import the prefetch under test, installed or not (the scripts' own folder is
    # examples/, which does not hold it).
    tested = os.path.dirname(os.path.dirname(os.path.abspath(prefetch.__file__)))
    path = os.pathsep.join(p for p in (tested, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail("torchrun hung; output:\n%s\n%s" % (exc.stdout, exc.stderr))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def test_ddp_example_under_torchrun_gives_each_rank_disjoint_covering_data(tmp_path):
    samples, epochs = 500, 2
    run_torchrun("ddp_train.py", ["--samples", samples, "--epochs", epochs, "--batch-size", 32,
                                  "--image-size", 16, "--out", tmp_path], timeout=240)
    records = [json.loads((tmp_path / ("rank%d.json" % r)).read_text()) for r in range(2)]
    assert [r["rank"] for r in records] == [0, 1]
    assert all(r["world_size"] == 2 and r["device"] == "cpu" for r in records)
    for loader in ("arrays", "dataloader"):
        for epoch in range(epochs):
            shards = [r[loader][str(epoch)] for r in records]
            assert len(shards[0]) == len(shards[1]) == samples // 2, (loader, epoch)
            assert not set(shards[0]) & set(shards[1]), (loader, epoch)
            assert sorted(shards[0] + shards[1]) == list(range(samples)), (loader, epoch)
        # A new order every epoch.
        assert records[0][loader]["0"] != records[0][loader]["1"]
