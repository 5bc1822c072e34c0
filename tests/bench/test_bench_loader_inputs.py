"""The loader harness (``prefetch.bench.measure_loader``, ``python -m prefetch.bench --loader``) on
inputs a user gets wrong: each is one clear line (an exception from the API, exit status 2 and
one line from the command line), never a traceback or an error blaming the wrong thing (the
verdict's advice: test_bench_loader_verdict.py)."""
import os
import subprocess
import sys

import pytest
import torch

import prefetch
from prefetch.bench import measure_loader
from prefetch.bench.target import TargetError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = "tests.bench.test_bench_loader_inputs"


def small_loader():
    return [torch.full((4, 8), i, dtype=torch.uint8) for i in range(50)]


def two_argument_step(batch, other):
    return batch, other


def not_a_transform():
    return 42


@pytest.mark.parametrize("arg, value", [("rounds", 0), ("batches", 0), ("seconds", 0.0),
                                        ("warmup", -1), ("rounds", 1.5), ("batches", True)])
def test_api_refuses_a_measurement_that_cannot_be_made(arg, value):
    kwargs = dict(seconds=0.2, rounds=1, warmup=0, batches=5, device="cpu")
    kwargs[arg] = value
    with pytest.raises(ValueError, match="measure_loader's %s must be" % arg):
        measure_loader(small_loader, **kwargs)


def test_api_refuses_a_step_that_does_not_take_one_batch():
    with pytest.raises(TargetError, match=r"step must be a callable taking one batch; two_argument_step has "
                                          r"the signature \(batch, other\)"):
        measure_loader(small_loader, two_argument_step, seconds=0.2, rounds=1, warmup=0, batches=5,
                       device="cpu")


def bench(*args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "prefetch.bench", *args, "--device", "cpu",
                           "--seconds", "0.2", "--rounds", "1", "--warmup", "0"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, message", [
    (["--step", HERE + ":two_argument_step"], "--step '%s:two_argument_step' must be a callable taking "
                                              "one batch" % HERE),
    (["--transform", HERE + ":not_a_transform"], "--transform '%s:not_a_transform': returned a int, not "
                                                 "a transform" % HERE),
    (["--batches", "0"], "--batches must be > 0, got 0"),
])
def test_cli_says_what_is_wrong_in_one_line(args, message, tmp_path):
    r = bench("--loader", HERE + ":small_loader", "--out", str(tmp_path), *args)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert message in lines[0], lines[0]


def test_wait_fraction_of_an_empty_epoch_is_zero():
    with prefetch.Prefetcher([], device="cpu") as p:
        assert list(p) == []
        assert p.stats()["wait_fraction"] == 0.0
