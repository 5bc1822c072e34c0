"""The CPU kernels' instruction-set builds (prefetch.ops.cpu_builds): each build a CPU runs writes
the values of the independent references (plain table indexing; torchvision's and Pillow's colour
formulas in float32 torch, tests/ops/test_color_jitter.py) — the C++ tests compare the builds byte
for byte, these check them through the ops as users call them; the limit is set, reported,
restored and read from PREFETCH_CPU_CAPABILITY, and a name that is no build is refused."""
import os
import subprocess
import sys

import pytest
import torch

from prefetch.ops import color_jitter, cpu_kernel_build, lookup, set_cpu_kernel_build
from prefetch.ops.cpu_builds import BUILDS

from .test_color_jitter import CONTRACTION_WITNESS, HUE, PILLOW_COLOR, chain_reference, draw, images


@pytest.fixture(scope="module")
def best():
    """The CPU's best build (the limit at its default)."""
    return cpu_kernel_build()


def effective(limit, best):
    """The build that runs under a limit: the lower of the limit and the CPU's best."""
    return BUILDS[max(BUILDS.index(limit), BUILDS.index(best))]


@pytest.fixture
def limited(best):
    previous = cpu_kernel_build()
    yield
    set_cpu_kernel_build(previous)
    assert cpu_kernel_build() == best


@pytest.mark.parametrize("limit", BUILDS)
def test_each_build_writes_the_references_values(limit, best, limited):
    set_cpu_kernel_build(limit)
    assert cpu_kernel_build() == effective(limit, best)
    g = torch.Generator().manual_seed(BUILDS.index(limit))
    # Rows narrower than one vector, one and two vectors and their remainders (16, 32, 64 bytes).
    for w in (5, 23, 64, 65, 130):
        x = torch.randint(0, 256, (4, 3, 3, w), dtype=torch.uint8, generator=g)
        tables = torch.randint(0, 256, (4, 3, 256), dtype=torch.uint8, generator=g)
        expected = torch.stack([torch.stack([tables[n, c][x[n, c].long()] for c in range(3)])
                                for n in range(4)])
        assert torch.equal(lookup(x, tables), expected), w
        x = images(6, 3, 4, w, g)
        steps, factors = draw(6, 4, g)
        assert torch.equal(color_jitter(x, steps, factors), chain_reference(x, steps, factors)), w
    # Every hue sextant and the saturated and grey pixels, each image its own hue.
    x = images(8, 3, 16, 67, g)
    steps = torch.full((8, 1), HUE)
    hues = torch.linspace(-0.5, 0.5, 8, dtype=torch.float64).view(8, 1)
    assert torch.equal(color_jitter(x, steps, hues), chain_reference(x, steps, hues))
    # Pillow's blend (pillow_color) at a factor where a contracted multiply-add writes other bytes
    x = torch.randint(0, 256, (2, 3, 32, 64), dtype=torch.uint8, generator=g)
    steps = torch.full((2, 1), PILLOW_COLOR)
    factors = torch.full((2, 1), CONTRACTION_WITNESS, dtype=torch.float64)
    assert torch.equal(color_jitter(x, steps, factors), chain_reference(x, steps, factors))


def test_the_setter_returns_the_build_before_and_refuses_other_names(best, limited):
    assert set_cpu_kernel_build("baseline") == best
    assert set_cpu_kernel_build("avx512") == "baseline"
    assert cpu_kernel_build() == best
    with pytest.raises(ValueError, match=r"builds are avx512, avx2, baseline, got 'sse4'"):
        set_cpu_kernel_build("sse4")
    with pytest.raises(ValueError, match=r"builds are \"avx512\", \"avx2\" and \"baseline\", got \"AVX2\""):
        torch.ops.prefetch._set_cpu_kernel_build("AVX2")
    assert cpu_kernel_build() == best


def _child(value, code):
    env = dict(os.environ, PREFETCH_CPU_CAPABILITY=value)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_the_environment_variable_sets_the_limit_at_import(best):
    child = _child("Baseline", "import prefetch.ops as o; print(o.cpu_kernel_build())")
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["baseline"]
    child = _child("avx2", "import prefetch.ops as o; print(o.cpu_kernel_build())")
    assert child.stdout.split() == [effective("avx2", best)], child.stderr


def test_an_environment_value_that_is_no_build_fails_the_import_naming_it():
    child = _child("sse2", "import prefetch")
    assert child.returncode != 0
    assert ("PREFETCH_CPU_CAPABILITY='sse2': the CPU kernels' builds are avx512, avx2, baseline"
            in child.stderr)
