"""What only a GPU can show about the engine: a slow consumer gets exactly what a synchronised
one gets; device and pinned host memory stay flat over 20 epochs; one primary context per
process, on the loader's device; tensors already on the device are ordered after the work that
made them; empty_cache() after a close with expandable segments; a bad device gather index is a
device assertion; decode=True on a GPU decodes before the copy. CUDA only (skipped without one;
FAIL_WITHOUT_CUDA=1 turns the skip into a failure on GPU runs). The host side of the same path,
checked without a GPU: test_cuda_path.py."""
import gc

import numpy as np
import pytest
import torch

import prefetch

from ..conftest import require_cuda
from ..helpers import engine_of

pytestmark = pytest.mark.cuda

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _images(n=96, size=64, seed=0):
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.integers(0, 256, size=(n, size, size, 3), dtype=np.uint8))


def _loaders(kind, images, labels):
    aug = prefetch.FusedAugment(MEAN, STD, crop=56, padding=4, hflip=0.5, vflip=0.2,
                                dtype=torch.float16, seed=3)
    if kind == "prefetcher":
        batches = [(images[i:i + 16], labels[i:i + 16]) for i in range(0, len(images), 16)]
        return prefetch.Prefetcher(batches, depth=2, transform=aug)
    return prefetch.ArrayLoader((images, labels), 16, seed=1, depth=2, transform=aug,
                                resident=kind.split("-")[1])


def _summaries(loader, epochs, slow):
    """Per-sample float64 sums, computed on the device right after each batch arrives. `slow`:
    the consumer stream is kept busy first (copies and kernels of later batches run meanwhile);
    otherwise the host synchronises on every batch (nothing can overlap)."""
    out = []
    for epoch in range(epochs):
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        for x, y in loader:
            if slow:
                torch.cuda._sleep(5_000_000)
            else:
                torch.cuda.synchronize()
            out.append((x.double().flatten(1).sum(1), y.clone()))
    torch.cuda.synchronize()
    return [(a.cpu(), b.cpu()) for a, b in out]


@pytest.mark.parametrize("kind", ["prefetcher", "array_loader-host", "array_loader-device"])
def test_slow_consumer_equals_synchronised_consumer(kind):
    require_cuda()
    images, labels = _images(), torch.arange(96)
    with _loaders(kind, images, labels) as loader:
        slow = _summaries(loader, 2, slow=True)
    with _loaders(kind, images, labels) as loader:
        synced = _summaries(loader, 2, slow=False)
    assert len(slow) == len(synced) == 12
    for i, ((a, la), (b, lb)) in enumerate(zip(slow, synced)):
        assert torch.equal(la, lb) and torch.equal(a, b), i


def _pinned_bytes():
    """Pinned host memory torch's caching host allocator holds (the draws travel through it)."""
    stats = getattr(torch.cuda, "host_memory_stats", None)
    return stats().get("allocated_bytes.current", 0) if stats is not None else 0


@pytest.mark.parametrize("kind", ["prefetcher", "array_loader-host", "array_loader-device"])
def test_device_and_pinned_memory_flat_over_20_epochs(kind):
    # Tolerance: nothing may grow after two warm-up epochs — not the device memory torch's
    # allocator holds (reserved) or hands out (allocated, measured with no batch held), not the
    # engine's pinned ring, not torch's pinned host pool (the draws travel through it).
    require_cuda()
    images, labels = _images(), torch.arange(96)
    with _loaders(kind, images, labels) as loader:
        for _ in range(2):
            for _ in loader:
                pass
        torch.cuda.synchronize()
        gc.collect()
        engine = engine_of(loader) if getattr(loader, "_pipeline", None) is not None else None
        ring = sum(prefetch._C._testing.slot_capacities(engine)) if engine is not None else 0
        allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        pinned = _pinned_bytes()
        for epoch in range(20):
            for _ in loader:
                pass
            torch.cuda.synchronize()
            gc.collect()
            assert torch.cuda.memory_allocated() <= allocated, epoch
            assert torch.cuda.memory_reserved() <= reserved, epoch
            if engine is not None:
                assert sum(prefetch._C._testing.slot_capacities(engine)) == ring, epoch
            assert _pinned_bytes() <= pinned, epoch


# --- one context per process, moves ordered, the allocator, device asserts, decode=True -------

# Reads, in the child, which devices hold a primary context (the driver's own answer, through
# libcuda: torch cannot say it without creating one), after the child has used a Prefetcher.
_CONTEXTS = """
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
count = ctypes.c_int()
assert cuda.cuDeviceGetCount(ctypes.byref(count)) == 0
def contexts():
    active = []
    for ordinal in range(count.value):
        dev, flags, on = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
        assert cuda.cuDeviceGet(ctypes.byref(dev), ordinal) == 0
        assert cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(on)) == 0
        if on.value:
            active.append(ordinal)
    return active
"""


def test_a_prefetcher_creates_a_context_on_its_own_device_only():
    """Every thread that touches CUDA (the producer, the consumer, the engine's events, a close on
    another thread) works on the Prefetcher's device: the process ends with one primary context,
    on that device — under DDP, one per rank, none of them on GPU 0 (benchmarks/gpu/ddp_contexts.py
    checks that under torchrun). With one GPU this checks that the context exists and nothing
    fails; with several, the Prefetcher uses the last one and nothing may touch the others."""
    require_cuda()
    from ..helpers import run_child

    child = run_child(_CONTEXTS + """
import threading
import torch
import prefetch
last = torch.cuda.device_count() - 1
dev = torch.device("cuda", last)
torch.cuda.set_device(dev)  # the training script's device, as under torchrun
aug = prefetch.FusedAugment([0.5] * 3, [0.2] * 3, crop=8, hflip=0.5, seed=1)
images = torch.randint(0, 256, (32, 12, 12, 3), dtype=torch.uint8)
batches = [(images[i:i + 8], torch.arange(8)) for i in range(0, 32, 8)]
p = prefetch.Prefetcher(batches, device=dev, transform=aug)
for epoch in range(2):
    for x, y in p:
        assert x.device == dev
t = threading.Thread(target=p.close)  # closed, and its last objects freed, on another thread
t.start(); t.join()
del p
import gc; gc.collect()
torch.cuda.synchronize(dev)
print("CONTEXTS", contexts(), "EXPECTED", [last])
""", timeout=120)
    assert child.returncode == 0, child.stderr
    line = [l for l in child.stdout.splitlines() if l.startswith("CONTEXTS")][-1]
    got, expected = line.split("EXPECTED")
    assert got.split("CONTEXTS")[1].strip() == expected.strip(), line


@pytest.mark.parametrize("transform", [False, True])
def test_tensors_already_on_the_device_are_ordered_after_the_work_that_made_them(transform):
    """A source that yields CUDA tensors written by a slow kernel on its (default) stream: the
    consumer must see the final values, with and without a transform (the copy stream waits for
    the producer's stream; the moves are protected for the consumer's stream)."""
    require_cuda()
    dev = torch.device("cuda", torch.cuda.current_device())

    def source():
        for k in range(6):
            x = torch.empty(1 << 20, device=dev)
            torch.cuda._sleep(20_000_000)  # the fill below lands long after the batch is staged
            x.fill_(float(k))
            yield x, torch.full((4,), k)

    aug = (lambda b: (b[0] * 2, b[1])) if transform else None
    with prefetch.Prefetcher(source(), device=dev, device_transform=aug) as p:
        for k, (x, y) in enumerate(p):
            expected = float(k) * (2 if transform else 1)
            assert bool((x == expected).all()), (k, x[:4])
            assert torch.equal(y.cpu(), torch.full((4,), k))


def test_empty_cache_with_expandable_segments_after_a_prefetcher_is_closed():
    """The copy stream is one of torch's pool streams, never destroyed: with expandable segments
    the allocator synchronises the streams its segments were used on at empty_cache(), which a
    destroyed stream would turn into a crash or an error."""
    require_cuda()
    from ..helpers import run_child

    child = run_child("""
import os
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
import gc, torch, prefetch
aug = prefetch.FusedAugment([0.5] * 3, [0.2] * 3, crop=16, hflip=0.5, seed=1)
images = torch.randint(0, 256, (64, 20, 20, 3), dtype=torch.uint8)
for round in range(3):
    p = prefetch.Prefetcher([(images[i:i + 16],) for i in range(0, 64, 16)], transform=aug)
    kept = [x for (x,) in p]
    p.close(); del p
    gc.collect()
    torch.cuda.empty_cache()
    del kept
    gc.collect()
    torch.cuda.empty_cache()
torch.cuda.synchronize()
print("OK")
""", timeout=120)
    assert child.returncode == 0 and "OK" in child.stdout, child.stderr


def test_a_bad_gather_index_on_the_device_is_a_device_assertion_with_its_values():
    """The CUDA kernels check device gather indices (a host check would synchronise): a bad one
    prints its values and fails a device-side assertion, which the host sees as
    'device-side assert triggered' with the message flushed (not a lost printf and a trap)."""
    require_cuda()
    from ..helpers import run_child

    child = run_child("""
import torch, prefetch
images = torch.zeros(4, 8, 8, 3, dtype=torch.uint8, device="cuda")
indices = torch.tensor([0, 99, 1], device="cuda")
try:
    torch.ops.prefetch.normalize_flip(images, [0.5] * 3, [0.2] * 3, indices=indices)
    torch.cuda.synchronize()
except RuntimeError as e:
    print("RAISED", str(e).splitlines()[0])
""", timeout=60)
    out = child.stdout + child.stderr
    assert "RAISED" in child.stdout and "device-side assert" in child.stdout, out
    assert "prefetch: indices[1] = 99 is out of range for 4 samples" in out, out
    assert "a gather index is out of range" in out, out


def test_decode_true_on_a_gpu_decodes_the_windows_before_the_copy(monkeypatch):
    """FusedAugment(decode=True) through a CUDA Prefetcher: the host stage decodes the windows
    (here with the CPU decoder, so the pixels are libjpeg's) and only they cross (what crosses is
    checked on the CPU: tests/engine/test_cuda_path.py); the output equals the CPU loader's within the
    GPU/CPU bound."""
    require_cuda()
    pytest.importorskip("PIL")
    if not prefetch.built_with_jpeg():
        pytest.skip("built without libjpeg-turbo")
    from prefetch.ops import gpu_decoders

    from ..reference import assert_close_across_devices
    from .test_cuda_path import _jpegs

    monkeypatch.setenv("PREFETCH_GPU_JPEG_DECODER", "cpu")
    gpu_decoders.clear_cache()
    files = _jpegs(12)
    batches = [(prefetch.Ragged.from_tensors(files[i:i + 4]), torch.arange(i, i + 4)) for i in range(0, 12, 4)]
    outs = {}
    for device in ("cpu", "cuda"):
        aug = prefetch.FusedAugment([0.5] * 3, [0.2] * 3, random_resized_crop=16, decode=True, hflip=0.5,
                                    seed=4)
        with prefetch.Prefetcher(batches, device=device, transform=aug) as p:
            outs[device] = [(x.cpu(), y.cpu()) for x, y in p]
    for (a, la), (b, lb) in zip(outs["cuda"], outs["cpu"]):
        assert torch.equal(la, lb)
        assert_close_across_devices(a, b)
    gpu_decoders.clear_cache()
