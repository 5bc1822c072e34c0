"""The bench measures the device it was given, not the current one: its CUDA events go on that
device's stream, its blocks are pinned under that device, and a zero-copy view of a block pinned
for another device is refused saying how to pin it. The CUDA calls are faked here, so the CPU
suite checks which device each one names; the GPU run checks the rest (the zero-copy view gives
what the copied batch gives)."""
import contextlib

import pytest
import torch

from prefetch.bench import h2d, timing
from prefetch.bench.pinned import check_view, cuda_view_of_pinned
from prefetch.ops import normalize_flip

from ..conftest import require_cuda
from ..ops.test_augment import MEAN, STD, random_case

CUDA0, CUDA1 = torch.device("cuda", 0), torch.device("cuda", 1)


class _Stream:
    def __init__(self, device):
        self.device = device


def test_kernel_samples_records_its_events_on_the_measured_devices_stream(monkeypatch):
    calls = []

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing

        def record(self, stream=None):
            calls.append(("record", stream.device if stream is not None else "the current device"))

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return 2.0  # milliseconds

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda device=None: _Stream(torch.device(device) if device is not None
                                                    else "the current device"))
    monkeypatch.setattr(torch.cuda, "synchronize",
                        lambda device=None: calls.append(("synchronize", torch.device(device)
                                                          if device is not None else "the current device")))
    ran = []
    times = timing.kernel_samples(lambda: ran.append(1), 3, "cuda:1", warmup=2, inner=4)
    assert times == [2.0 / 1e3 / 4] * 3
    assert len(ran) == 2 + 3 * 4
    assert calls and all(device == CUDA1 for _, device in calls), calls
    assert [c for c, _ in calls].count("record") == 6


@pytest.mark.parametrize("fn,inner", [(h2d.measure, "_measure"),
                                      (h2d.measure_zero_copy, "_measure_zero_copy")])
def test_h2d_pins_and_measures_under_the_measured_device(monkeypatch, fn, inner):
    current = []

    @contextlib.contextmanager
    def device(d):
        current.append(torch.device(d))
        yield
        current.pop()

    seen = []
    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(h2d, inner, lambda dev, *a: seen.append((dev, list(current))) or "rows")
    assert fn("cuda:1") == "rows"
    assert seen == [(CUDA1, [CUDA1])]
    with pytest.raises(ValueError, match="needs a CUDA device"):
        fn("cpu")


def test_a_view_of_a_block_pinned_for_another_device_says_how_to_pin_it():
    with pytest.raises(ValueError, match=r"pinned while cuda:0 was the current device, so torch maps "
                                         r"it to cuda:0, not to the cuda:1 asked for; pin it under "
                                         r"`with torch.cuda.device\(1\):`"):
        check_view(CUDA0, 4096, 4096, CUDA1)
    with pytest.raises(ValueError, match="not addressable from cuda:1 at its host address"):
        check_view(CUDA1, 8192, 4096, CUDA1)
    check_view(CUDA1, 4096, 4096, CUDA1)  # the zero-copy view: same device, same address


def test_cuda_view_of_pinned_refuses_what_it_cannot_map():
    with pytest.raises(ValueError, match=r"needs a pinned CPU tensor .*on cpu that is not pinned"):
        cuda_view_of_pinned(torch.zeros(4, dtype=torch.uint8), "cuda:0")
    with pytest.raises(ValueError, match="needs a CUDA device, got cpu"):
        cuda_view_of_pinned(torch.zeros(4, dtype=torch.uint8), "cpu")
    with pytest.raises(ValueError, match="needs a pinned CPU tensor .*on meta$"):
        cuda_view_of_pinned(torch.zeros(4, dtype=torch.uint8, device="meta"), "cuda")


@pytest.mark.cuda
def test_zero_copy_view_gives_what_the_copied_batch_gives():
    require_cuda()
    dev = torch.device("cuda", torch.cuda.current_device())
    images, _, _, g = random_case("cpu", 6, 3, 20, 24, "NHWC", seed=50)
    pinned = images.pin_memory()
    hflip = (torch.rand(4, generator=g) < 0.5).cuda()
    expected = normalize_flip(pinned[2:].cuda(), MEAN[:3], STD[:3], hflip=hflip, crop=(16, 16),
                              dtype=torch.float16)
    view = cuda_view_of_pinned(pinned[2:], dev)  # a view with a storage offset
    assert view.device == dev and view.shape == (4, 20, 24, 3)
    assert view.data_ptr() == pinned[2:].data_ptr()  # the host memory itself, not a copy
    del pinned  # the view keeps the host memory alive
    for _ in range(2):
        out = normalize_flip(view, MEAN[:3], STD[:3], hflip=hflip, crop=(16, 16), dtype=torch.float16)
        assert torch.equal(out, expected)
