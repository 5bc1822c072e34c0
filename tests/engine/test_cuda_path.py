"""What the CUDA path does on the host, checked without a GPU.

- The producer thread makes the loader's device current before anything else (a new thread
  starts on device 0, where its first CUDA call would create a context in every DDP rank).
- Tensors already on a device in a batch (the "moves") are ordered after the work that made them:
  the copy stream waits for the producer's current stream on each of their devices.
- The transform contract's host stage: ``Transform.host_apply`` sees each batch on the host before
  it is collated and copied, at the position ``apply`` gets; ``FusedAugment(decode=True)`` on a GPU
  decodes its windows there, so the encoded bytes never cross to the device.
- ``resize_masks`` reads the draws' host copies, never the device flips.

What only a GPU can show (streams really ordered, one context per process) is in
tests/engine/test_cuda_reliability.py and benchmarks/gpu_check.sh.
"""
import contextlib
import io
import threading

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import prefetch
from prefetch._engine import device_stage as _pipeline
from prefetch.transforms.resizing import DecodedWindows
from prefetch.transforms.fused_augment import Draws
from prefetch.transforms import BatchPosition, Transform, has_host_stage

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


# --- the producer thread's device ---------------------------------------------------------------

def test_bind_thread_to_sets_only_a_cuda_device(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(d))
    _pipeline.bind_thread_to(torch.device("cpu"))
    assert calls == []
    _pipeline.bind_thread_to(torch.device("cuda", 3))
    assert calls == [torch.device("cuda", 3)]


def test_the_producer_binds_its_thread_before_it_touches_the_source(monkeypatch):
    events = []
    real = _pipeline.bind_thread_to

    def spy(device):
        events.append(("bind", threading.current_thread().name, device))
        real(device)

    monkeypatch.setattr(_pipeline, "bind_thread_to", spy)

    class Source:
        def __iter__(self):
            events.append(("iter", threading.current_thread().name, None))
            return iter([torch.zeros(2)])

    with prefetch.Prefetcher(Source(), device="cpu") as p:
        assert len(list(p)) == 1
    assert [e[0] for e in events] == ["bind", "iter"]
    assert events[0][1] == events[1][1] == "prefetch-producer"
    assert events[0][2] == torch.device("cpu")


# --- moves ordered after the work that made them -------------------------------------------------

class _FakeTensor:
    def __init__(self, device):
        self.device = torch.device(device)
        self.is_cuda = self.device.type == "cuda"
        self.recorded = []

    def record_stream(self, stream):
        self.recorded.append(stream)


class _FakeStream:
    def __init__(self):
        self.waited = []

    def wait_stream(self, other):
        self.waited.append(other)


def test_the_copy_stream_waits_once_for_each_device_of_the_moves():
    copy_stream = _FakeStream()
    moves = [_FakeTensor("cuda:0"), _FakeTensor("cuda:1"), _FakeTensor("cuda:0"), _FakeTensor("cpu")]
    current = lambda device: ("current stream of", device)  # noqa: E731
    _pipeline.order_moves(moves, torch.device("cuda", 0), copy_stream, current)
    assert copy_stream.waited == [current(torch.device("cuda", 0)), current(torch.device("cuda", 1))]
    # Read on the copy stream (same device) or by torch's copy on their device's current stream.
    assert moves[0].recorded == [copy_stream] and moves[2].recorded == [copy_stream]
    assert moves[1].recorded == [current(torch.device("cuda", 1))]
    assert moves[3].recorded == []


def test_no_moves_no_waits():
    copy_stream = _FakeStream()
    _pipeline.order_moves([], torch.device("cuda", 0), copy_stream,
                          lambda device: pytest.fail("nothing to wait for"))
    assert copy_stream.waited == []


# --- what the consumer's stream is protected for -------------------------------------------------

def _device_stage(monkeypatch, device_transform):
    """A _DeviceStage for cuda:0 with the stream calls faked: its __call__ runs on the host."""
    monkeypatch.setattr(torch.cuda, "ExternalStream", lambda handle, device: ("copy stream", handle))
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(_pipeline, "unflatten", lambda spec, tensors, moved, device: ("unflattened", tensors, moved))
    return _pipeline.DeviceStage(torch.device("cuda", 0), 7, None, device_transform, rank=0)


def test_with_a_transform_the_consumer_is_protected_for_what_the_transform_made(monkeypatch):
    # The transform's output is allocated on the copy stream and read on the consumer's: it is
    # what must be record_stream-ed there (on an H200 a slow consumer read the next batch's
    # bytes in its place when the transform's input was protected instead).
    stage = _device_stage(monkeypatch, lambda batch: ("transformed", batch))
    batch, protect = stage(None, ["views of the packed block"], [], epoch=0, index=0)
    assert batch == ("transformed", ("unflattened", ["views of the packed block"], []))
    assert protect is batch


def test_without_a_transform_only_the_moves_need_protection(monkeypatch):
    stage = _device_stage(monkeypatch, None)
    assert stage(None, ["views"], [], epoch=0, index=0) == (("unflattened", ["views"], []), None)


# --- the host stage of the transform contract ---------------------------------------------------

class _Recorder(Transform):
    """A host stage that adds each sample's host-side sum to the labels, and an apply that
    records its position; both record what they saw."""

    def __init__(self):
        self.host_calls, self.apply_calls = [], []

    def host_apply(self, batch, position, device):
        images, labels = batch
        if isinstance(images, list):  # a Samples: the per-sample path, as the source gave it
            images = torch.stack(list(images))
        self.host_calls.append((threading.current_thread().name, position, torch.device(device),
                                images.device.type, tuple(images.shape)))
        sums = images.reshape(images.shape[0], -1).sum(1)
        return images, labels + sums

    def apply(self, batch, position):
        self.apply_calls.append(position)
        return batch


def _batches(n=5, size=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, 256, (4, size, size, 3), dtype=torch.uint8, generator=g),
             torch.arange(4) + 10 * k) for k in range(n)]


def test_has_host_stage_only_for_a_transform_that_overrides_it():
    assert has_host_stage(_Recorder())
    assert not has_host_stage(Transform())
    assert not has_host_stage(lambda b: b)
    assert not has_host_stage(prefetch.FusedAugment(MEAN, STD))  # nothing to do before the copy
    assert has_host_stage(prefetch.FusedAugment(MEAN, STD, random_resized_crop=8, decode=True))


def test_the_host_stage_sees_each_batch_on_the_host_at_applys_position():
    batches = _batches()
    t = _Recorder()
    with prefetch.Prefetcher(batches, device="cpu", transform=t) as p:
        for epoch in range(2):
            got = list(p)
            for (images, labels), (out_images, out_labels) in zip(batches, got):
                assert torch.equal(out_images, images)
                assert torch.equal(out_labels, labels + images.reshape(4, -1).sum(1))
    assert len(t.host_calls) == len(t.apply_calls) == 2 * len(batches)
    assert [c[1] for c in t.host_calls] == t.apply_calls
    assert [(p.epoch, p.index) for p in t.apply_calls] == [(e, k) for e in range(2) for k in range(5)]
    assert {c[0] for c in t.host_calls} == {"prefetch-producer"}
    assert {c[2] for c in t.host_calls} == {torch.device("cpu")}
    assert {c[3] for c in t.host_calls} == {"cpu"}


class _Images(Dataset):
    def __init__(self, n=24, size=6):
        g = torch.Generator().manual_seed(1)
        self.images = torch.randint(0, 256, (n, size, size, 3), dtype=torch.uint8, generator=g)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i], i


@pytest.mark.parametrize("lease", [True, False])
def test_the_host_stage_reads_the_worker_rings_slots_and_releases_them(monkeypatch, lease):
    """With DataLoader workers writing into the shared ring, the host stage gets views of the
    slot; each slot is released after the engine has collated what the stage kept (otherwise the
    ring's slots run out within an epoch and it would hang: the timeout turns that into a failure).
    lease=False: the CUDA device's path (the batch arrives as the slot's packed views), on the CPU."""
    from prefetch.sources import worker_ring as _worker_ring

    monkeypatch.setattr(_worker_ring, "LEASE_ON_CPU", lease)
    ds = _Images()
    loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=prefetch.collate.samples)
    t = _Recorder()
    with prefetch.Prefetcher(loader, device="cpu", transform=t, timeout=60) as p:
        for epoch in range(3):
            seen = 0
            for images, labels in p:
                idx = labels - images.reshape(images.shape[0], -1).sum(1)  # undo the host stage
                assert torch.equal(images, ds.images[idx])
                seen += images.shape[0]
            assert seen == len(ds)
    assert len(t.host_calls) == 3 * len(ds) // 4


def test_an_error_in_the_host_stage_reaches_the_consumer_and_the_next_epoch_works():
    class Failing(_Recorder):
        fail_at = 2

        def host_apply(self, batch, position, device):
            if position.index == self.fail_at:
                raise ValueError("bad batch %d" % position.index)
            return super().host_apply(batch, position, device)

    t = Failing()
    with prefetch.Prefetcher(_batches(), device="cpu", transform=t) as p:
        it = iter(p)
        next(it), next(it)
        with pytest.raises(ValueError, match="bad batch 2") as info:
            next(it)
        assert any("batch 2" in note for note in getattr(info.value, "__notes__", []))
        t.fail_at = -1
        assert len(list(p)) == 5


def test_the_host_stage_runs_on_the_array_loaders_host_path():
    images = torch.randint(0, 256, (12, 5, 5, 3), dtype=torch.uint8)
    labels = torch.arange(12)
    t = _Recorder()
    with prefetch.ArrayLoader((images, labels), 4, shuffle=False, device="cpu", transform=t) as loader:
        got = list(loader)
    assert len(t.host_calls) == 3
    for k, (x, y) in enumerate(got):
        assert torch.equal(x, images[4 * k:4 * k + 4])
        assert torch.equal(y, labels[4 * k:4 * k + 4] + x.reshape(4, -1).sum(1))


# --- FusedAugment(decode=True): the windows decoded in the host stage ---------------------------

def _jpegs(n=6, seed=3):
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        h, w = int(rng.integers(20, 60)), int(rng.integers(20, 60))
        smooth = rng.integers(0, 256, size=(h // 4 + 1, w // 4 + 1, 3)).astype(np.uint8)
        pixels = np.kron(smooth, np.ones((4, 4, 1), dtype=np.uint8))[:h, :w]
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=90,
                                     subsampling=[0, 1, 2][k % 3], progressive=k % 2 == 1)
        out.append(torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8))
    return out


@pytest.fixture
def cpu_gpu_decoder(monkeypatch):
    """The GPU decoder choice forced to the CPU decoder (what a machine without TorchCodec or
    torchvision gets), with the cache cleared around the test."""
    from prefetch.ops import gpu_decoders

    monkeypatch.setenv("PREFETCH_GPU_JPEG_DECODER", "cpu")
    gpu_decoders.clear_cache()
    yield
    gpu_decoders.clear_cache()


def test_fused_augment_decodes_its_windows_in_the_host_stage_for_a_gpu(cpu_gpu_decoder):
    pytest.importorskip("PIL")
    if not prefetch.built_with_jpeg():
        pytest.skip("built without libjpeg-turbo")
    files = _jpegs()
    batch = (prefetch.Ragged.from_tensors(files), torch.arange(len(files)))
    aug = prefetch.FusedAugment(MEAN, STD, random_resized_crop=16, decode=True, hflip=0.5, vflip=0.5,
                                seed=11)
    pos = BatchPosition(2, 5, 0)
    assert aug.host_apply(batch, pos, torch.device("cpu")) is batch  # a CPU loader: nothing to do
    host = aug.host_apply(batch, pos, torch.device("cuda", 0))
    leaf = host[0]
    assert isinstance(leaf, DecodedWindows)
    d = aug.draws(len(files), *zip(*[(s[0], s[1]) for s in prefetch.ops.jpeg_sizes(batch[0]).tolist()]),
                  epoch=2, index=5, rank=0)
    # Only each drawn window is there, as pixels: no encoded byte is left to cross.
    assert [tuple(s[:2]) for s in leaf.windows.shapes()] == [tuple(b[2:]) for b in d.boxes.tolist()]
    assert torch.equal(leaf.hflip, d.hflip) and torch.equal(leaf.vflip, d.vflip)
    assert leaf.bicubic is None
    # apply() of the host stage's result equals apply() of the encoded batch, bit for bit.
    got = aug.apply(host, pos)[0]
    expected = aug.apply(batch, pos)[0]
    assert torch.equal(got, expected)


class _AsIfOnAGpu(prefetch.FusedAugment):
    """FusedAugment whose host stage believes its loader is on a GPU: the decode=True host path,
    through a CPU loader's engine (collation of the DecodedWindows, the copy, apply)."""

    def host_apply(self, batch, position, device):
        return super().host_apply(batch, position, torch.device("cuda", 0))


class _Files(Dataset):
    def __init__(self, files):
        self.files = files

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        return self.files[i], i


@pytest.mark.parametrize("workers,interpolation", [(0, "bilinear"), (2, "bilinear"), (0, "random")])
def test_decode_in_the_host_stage_through_a_loader_equals_the_fused_decode(cpu_gpu_decoder, workers,
                                                                           interpolation):
    pytest.importorskip("PIL")
    if not prefetch.built_with_jpeg():
        pytest.skip("built without libjpeg-turbo")
    files = _jpegs(12)
    # ("random": the per-sample bicubic draws travel with the windows, DecodedWindows.bicubic)
    kwargs = dict(random_resized_crop=(12, 10), decode=True, hflip=0.5, seed=5, dtype=torch.bfloat16,
                  interpolation=interpolation)
    results = []
    for cls in (_AsIfOnAGpu, prefetch.FusedAugment):
        loader = DataLoader(_Files(files), batch_size=4, num_workers=workers,
                            collate_fn=prefetch.collate.samples)
        with prefetch.Prefetcher(loader, device="cpu", transform=cls(MEAN, STD, **kwargs), timeout=60) as p:
            results.append([(x.clone(), y.clone()) for x, y in p])
    for (a, la), (b, lb) in zip(*results):
        assert torch.equal(la, lb)
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))


# --- resize_masks reads host copies only ----------------------------------------------------------

def test_resize_masks_reads_the_draws_host_copies_not_the_device_flips():
    g = torch.Generator().manual_seed(4)
    shapes = [(9, 7), (6, 11)]
    images = prefetch.Ragged.from_tensors([torch.zeros(h, w, 3, dtype=torch.uint8) for h, w in shapes])
    masks = prefetch.Ragged.from_tensors([torch.randint(0, 9, (h, w, 1), generator=g) for h, w in shapes])
    aug = prefetch.FusedAugment(MEAN, STD, random_resized_crop=5, hflip=0.5, vflip=0.5, seed=2, mask_key=1)
    host = aug.draws(2, [9, 6], [7, 11], 0, 3, 0)
    expected = aug.resize_masks(masks, images, host)
    # Device draws whose flips cannot be read on the host at all (meta tensors): reading them
    # would have been a host synchronisation on a GPU; here it would raise.
    device_side = Draws(host.hflip.to("meta"), host.vflip.to("meta"), host.crop, None, host.boxes, host)
    assert torch.equal(aug.resize_masks(masks, images, device_side), expected)
    # And the host copies are the draws themselves: nearest-neighbour of each window, flipped.
    for k, ((h, w), box) in enumerate(zip(shapes, host.boxes.tolist())):
        top, left, bh, bw = box
        m = masks.tensors()[k][top:top + bh, left:left + bw, 0]
        rows = (torch.arange(5, dtype=torch.float64) * (bh / 5)).floor().long().clamp(max=bh - 1)
        cols = (torch.arange(5, dtype=torch.float64) * (bw / 5)).floor().long().clamp(max=bw - 1)
        ref = m[rows][:, cols]
        if host.vflip[k]:
            ref = ref.flip(0)
        if host.hflip[k]:
            ref = ref.flip(1)
        assert torch.equal(expected[k], ref)


def test_draws_moved_to_a_device_keep_their_host_copies():
    aug = prefetch.FusedAugment(MEAN, STD, crop=4, padding=2, hflip=0.5)
    d = aug.draws(3, 6, 6)
    moved = d.to("cpu")
    assert moved.host is d and moved.to("cpu").host is d
