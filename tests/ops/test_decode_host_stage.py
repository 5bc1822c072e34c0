"""The GPU JPEG path's host stage on a CPU (issue 44 item 4): its C++ steps against independent
references, and the whole path through the fake GPU decoder
(``prefetch.ops.gpu_decoders.FakeGpuBackend``), its Python calls counted per batch.

- ``_gather_spans`` against torch's slicing, its errors the Python gather's;
- ``_jpeg_layouts`` against the Python ``jpeg_layout`` (every test JPEG, every truncation, EXIF,
  Adobe and RGB markers, seeded random corruptions);
- ``_ragged_views`` and ``_pack_windows`` against slicing;
- ``decode_jpeg`` through the fake decoder equal to the CPU decoder, byte for byte, refused
  images included, with one batched call;
- FusedAugment(decode=True) fed from a packed store: the host stage with the fake decoder gives
  the CPU path's output exactly, and the Python calls of a batch's gather, host stage and apply do
  not grow with the batch's images (``sys.setprofile``: every Python call and every C call made
  from Python)."""
import collections
import contextlib
import gc
import io
import os
import sys

import numpy as np
import pytest
import torch

import prefetch
from prefetch import Ragged
from prefetch._core import tree
from prefetch._core.tree import host_batch
from prefetch.ops import decode_jpeg, gpu_decoders
from prefetch.ops.gpu_backends import FakeGpuBackend
from prefetch.ops.jpeg_headers import LAYOUT_FIELDS, jpeg_layout, jpeg_layouts, layout_of_row
from prefetch.transforms import BatchPosition

from .test_decode import CASES, bad_streams, jpeg
from .test_gpu_decoders import exif, with_segment

Image = pytest.importorskip("PIL.Image")

WITH_JPEG = prefetch.built_with_jpeg()
needs_jpeg = pytest.mark.skipif(not WITH_JPEG, reason="the CPU decoder (libjpeg-turbo) is the reference")
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(autouse=True)
def _fresh_choice(monkeypatch):
    monkeypatch.delenv(gpu_decoders.ENV_VAR, raising=False)
    gpu_decoders.clear_cache()
    yield
    gpu_decoders.clear_cache()


def as_tensor(data):
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if len(data) else torch.empty(0, dtype=torch.uint8)


# --- _gather_spans ---------------------------------------------------------------------------------

def reference_gather(values, spans):
    parts = [values[s:s + c] for s, c in spans.tolist()]
    return torch.cat(parts) if parts else values[:0]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32, torch.float64])
def test_gather_spans_equals_slicing(dtype):
    g = torch.Generator().manual_seed(1)
    values = torch.randint(0, 100, (5000,), generator=g).to(dtype)
    for trial in range(20):
        n = int(torch.randint(0, 40, (1,), generator=g))
        starts = torch.randint(0, 5000, (n,), generator=g)
        counts = torch.minimum(torch.randint(0, 300, (n,), generator=g), 5000 - starts)
        spans = torch.stack((starts, counts), 1)  # overlapping, out of order, empty ranges
        got = torch.ops.prefetch._gather_spans(values, spans, "x")
        assert got.dtype == dtype and torch.equal(got, reference_gather(values, spans))


def test_gather_spans_of_ranges_larger_than_a_task_on_several_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        values = torch.randint(0, 256, (7 << 20,), dtype=torch.uint8)
        spans = torch.tensor([[5, 3 << 20], [0, 0], [100, 17], [4 << 20, (3 << 20) - 1], [9, 1 << 20]])
        assert torch.equal(torch.ops.prefetch._gather_spans(values, spans), reference_gather(values, spans))
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("span, position", [((-1, 2), 1), ((3, -1), 1), ((90, 11), 1), ((101, 0), 1),
                                            ((2 ** 62, 2 ** 62), 1)])
def test_gather_spans_names_a_range_outside_as_the_python_gather_does(span, position):
    values = torch.arange(100, dtype=torch.uint8)
    spans = torch.tensor([[0, 5], list(span)])
    want = ("prefetch: images.values: range %d + %d (position %d of the batch) is out of range for "
            "100 elements" % (span[0], span[1], position))
    with pytest.raises(IndexError) as info:
        torch.ops.prefetch._gather_spans(values, spans, "images.values")
    assert str(info.value).splitlines()[0] == want
    # The same message from the torch path (a strided tensor is gathered there).
    strided = torch.arange(200, dtype=torch.uint8)[::2]
    with pytest.raises(IndexError) as info:
        tree.gather_spans(strided, spans, "images.values")
    assert str(info.value) == want


def test_tree_gather_spans_takes_the_cpp_gather_for_dense_host_values(monkeypatch):
    values = torch.arange(1000, dtype=torch.int16)
    spans = torch.tensor([[10, 5], [0, 3], [990, 10]])
    calls = []
    real = torch.ops.prefetch._gather_spans

    class Spy:
        def __call__(self, *args):
            calls.append(args[2])
            return real(*args)

    monkeypatch.setattr(torch.ops.prefetch, "_gather_spans", Spy())
    assert torch.equal(tree.gather_spans(values, spans, "leaf"), reference_gather(values, spans))
    assert calls == ["leaf"]
    strided = torch.arange(2000, dtype=torch.int16)[::2]  # not dense: torch's path
    assert torch.equal(tree.gather_spans(strided, spans), reference_gather(strided, spans))
    assert calls == ["leaf"]


def test_gather_spans_refuses_what_is_not_a_dense_1d_tensor_and_int64_pairs():
    with pytest.raises(RuntimeError, match=r"values must be a 1-D tensor with stride 1, got shape \[2, 3\]"):
        torch.ops.prefetch._gather_spans(torch.zeros(2, 3), torch.zeros(0, 2, dtype=torch.int64))
    with pytest.raises(RuntimeError, match=r"spans must be int64 \[n, 2\].*got dtype Int and shape \[1, 2\]"):
        torch.ops.prefetch._gather_spans(torch.zeros(4), torch.zeros(1, 2, dtype=torch.int32))
    assert torch.ops.prefetch._gather_spans(torch.zeros(4), torch.zeros(0, 2, dtype=torch.int64)).shape == (0,)


# --- _jpeg_layouts ---------------------------------------------------------------------------------

def row_of(layout, nbytes):
    """The table row the Python reading gives."""
    values = dict(layout._asdict(), rgb_coded=layout.rgb_coded, bytes=nbytes)
    return [(-1 if values[f] is None else int(values[f])) for f in LAYOUT_FIELDS]


def assert_layouts_match(streams):
    table = jpeg_layouts([as_tensor(s) for s in streams]).tolist()
    for k, s in enumerate(streams):
        assert table[k] == row_of(jpeg_layout(s), len(s)), (k, bytes(s[:40]))


def test_the_layout_fields_are_the_cpp_tables_columns():
    assert tuple(torch.ops.prefetch._jpeg_layout_fields()) == LAYOUT_FIELDS


def test_jpeg_layouts_read_every_test_jpeg_as_the_python_reading_does():
    assert_layouts_match([jpeg(name) for name in CASES])
    assert_layouts_match(list(bad_streams().values()))
    assert jpeg_layouts([]).shape == (0, len(LAYOUT_FIELDS))


def test_jpeg_layouts_of_every_truncation_match():
    for name in ("420", "cmyk", "progressive_444"):
        whole = jpeg(name)
        assert_layouts_match([whole[:cut] for cut in range(min(len(whole), 700))])


def test_jpeg_layouts_read_exif_adobe_and_rgb_markers_as_the_python_reading_does():
    base = jpeg("444")
    streams = []
    for order in "<>":
        for orientation in (1, 3, 6, 8):
            streams.append(with_segment(base, 0xE1, exif(orientation, order)))
    streams.append(with_segment(with_segment(base, 0xE1, exif(5)), 0xE1, exif(6)))  # the first counts
    streams.append(with_segment(base, 0xE1, b"Exif\0\0MM\0\x2a\xff\xff\xff\xf0"))  # IFD far away
    streams.append(with_segment(base, 0xE1, b"Exif\0\0II\x2a\0\x08\0\0\0\x05\0"))  # entries cut off
    adobe = b"Adobe\0\x64\0\0\0\0"
    for transform in (0, 1, 2):
        streams.append(with_segment(base, 0xEE, adobe + bytes([transform])))
    streams.append(with_segment(with_segment(base, 0xEE, adobe + b"\x01"), 0xEE, adobe + b"\x00"))
    # Three components with ids R, G, B and no JFIF marker: stored as RGB.
    no_jfif = base[:2] + base[2 + 2 + int.from_bytes(base[4:6], "big"):] if base[3] == 0xE0 else base
    sof = no_jfif.index(b"\xff\xc0")
    rgb = bytearray(no_jfif)
    for k, ident in enumerate(b"RGB"):
        rgb[sof + 10 + 3 * k] = ident
    streams += [no_jfif, bytes(rgb), bytes(rgb)[:sof + 16]]
    assert_layouts_match(streams)
    table = jpeg_layouts([as_tensor(s) for s in streams])
    assert table[:, LAYOUT_FIELDS.index("orientation")].tolist()[:8] == [1, 3, 6, 8] * 2
    assert table[-2, LAYOUT_FIELDS.index("rgb_coded")] == 1  # the test reaches the RGB rule


def test_jpeg_layouts_of_random_corruptions_match():
    rng = np.random.default_rng(44)
    bases = [jpeg(n) for n in ("420", "gray", "cmyk", "progressive_420")]
    bases.append(with_segment(jpeg("444"), 0xE1, exif(6, ">")))
    streams = []
    for _ in range(3000):
        s = bytearray(bases[rng.integers(len(bases))])
        head = min(len(s), 400)
        for _ in range(rng.integers(1, 6)):
            pos = int(rng.integers(0, head))
            choice = rng.integers(4)
            if choice == 0:
                s[pos] = int(rng.integers(256))
            elif choice == 1:
                s[pos] = 0xFF
            elif choice == 2:  # a length byte: segments overlap or run past the end
                s[pos:pos + 2] = bytes(rng.integers(0, 256, 2, dtype=np.uint8))
            else:
                s = s[:pos] + bytes([0xFF, int(rng.integers(0xC0, 0x100))]) + s[pos:]
        streams.append(bytes(s[:int(rng.integers(0, len(s) + 1))]) if rng.random() < 0.3 else bytes(s))
    assert_layouts_match(streams)


def test_jpeg_layouts_refuse_what_is_not_a_files_bytes_naming_the_image():
    with pytest.raises(RuntimeError, match=r"image 1 must be a 1-D uint8 CPU tensor.*Int"):
        jpeg_layouts([torch.zeros(3, dtype=torch.uint8), torch.zeros(3, dtype=torch.int32)])
    with pytest.raises(RuntimeError, match=r"image 0 must be a 1-D uint8 CPU tensor with stride 1"):
        jpeg_layouts([torch.zeros(6, dtype=torch.uint8)[::2]])


def test_the_batched_screen_agrees_with_refuses_image_by_image():
    base = jpeg("420")
    streams = [jpeg(n) for n in CASES] + list(bad_streams().values())
    streams += [with_segment(base, 0xE1, exif(o)) for o in (1, 6)]
    streams += [with_segment(base, 0xEE, b"Adobe\0\x64\0\0\0\0\x00")]
    table = jpeg_layouts([as_tensor(s) for s in streams])
    layouts = [jpeg_layout(s) for s in streams]
    for backend in (gpu_decoders.TorchvisionBackend(), gpu_decoders.TorchCodecBackend(), FakeGpuBackend(),
                    gpu_decoders.CpuBackend()):
        want = [backend.refuses(layout) is not None for layout in layouts]
        assert backend.refused(table).tolist() == want, backend.name
    # Its reasons read back from a row: the same as from the stream.
    vision = gpu_decoders.TorchvisionBackend()
    for k, layout in enumerate(layouts):
        assert vision.refuses(layout_of_row(table[k].tolist())) == vision.refuses(layout)


# --- _ragged_views and _pack_windows --------------------------------------------------------------

def test_ragged_views_are_views_of_the_values_hwc_or_chw():
    images = [torch.randint(0, 256, (h, w, 3), dtype=torch.uint8) for h, w in ((2, 3), (4, 1), (1, 5))]
    r = Ragged.from_tensors(images)
    offsets, sizes = r.offsets, r.sizes
    hwc = torch.ops.prefetch._ragged_views(r.values, offsets, sizes)
    chw = torch.ops.prefetch._ragged_views(r.values, offsets, sizes, True)
    for k, image in enumerate(images):
        assert torch.equal(hwc[k], image) and torch.equal(chw[k], image.permute(2, 0, 1))
        assert hwc[k].data_ptr() == chw[k].data_ptr() == r.values.data_ptr() + int(offsets[k])
    one_d = torch.ops.prefetch._ragged_views(r.values, offsets, sizes.prod(1, keepdim=True))
    assert [t.shape for t in one_d] == [(18,), (12,), (15,)]
    on_meta = torch.ops.prefetch._ragged_views(r.values.to("meta"), offsets, sizes, True)
    assert [tuple(t.shape) for t in on_meta] == [(3, 2, 3), (3, 4, 1), (3, 1, 5)]


def test_ragged_views_refuse_a_sample_outside_the_values():
    values = torch.zeros(10, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match=r"sample 1 \(offset 8, 3 elements\) does not lie inside the 10"):
        torch.ops.prefetch._ragged_views(values, torch.tensor([0, 8]), torch.tensor([[2], [3]]))
    with pytest.raises(RuntimeError, match=r"sample 0 \(offset -1"):
        torch.ops.prefetch._ragged_views(values, torch.tensor([-1]), torch.tensor([[2]]))
    with pytest.raises(RuntimeError, match=r"negative size"):
        torch.ops.prefetch._ragged_views(values, torch.tensor([0]), torch.tensor([[2, -1]]))
    with pytest.raises(RuntimeError, match=r"chw views are of HWC samples \(rank 3\), got rank 1"):
        torch.ops.prefetch._ragged_views(values, torch.tensor([0]), torch.tensor([[2]]), True)


def pack_reference(images, table, chw, out):
    fits = []
    for image, (dest, H, W, t, l, h, w) in zip(images, table.tolist()):
        ok = (image is not None and image.dtype == torch.uint8 and image.device == out.device
              and tuple(image.shape) == ((3, H, W) if chw else (H, W, 3)))
        if ok:
            hwc = image.permute(1, 2, 0) if chw else image
            out[dest:dest + h * w * 3] = hwc[t:t + h, l:l + w].reshape(-1)
        fits.append(ok)
    return fits


@pytest.mark.parametrize("chw", [False, True])
def test_pack_windows_cuts_each_window_and_skips_what_does_not_fit(chw):
    g = torch.Generator().manual_seed(3)
    shapes = [(5, 7), (3, 3), (6, 2), (4, 6), (2, 9), (8, 8)]
    images = [torch.randint(0, 256, (3, h, w) if chw else (h, w, 3), dtype=torch.uint8, generator=g)
              for h, w in shapes]
    images[1] = images[1].float()                       # not uint8
    images[3] = images[3].transpose(1, 2) if chw else images[3][:, :, :2]  # not what the header says
    images[4] = None                                    # the decoder failed on it
    rows, dest = [], 0
    for k, (h, w) in enumerate(shapes):
        t, l = k % h, (2 * k) % w
        bh, bw = h - t, max(1, w - l - 1)
        rows.append([dest, h, w, t, l, bh, bw])
        dest += bh * bw * 3
    table = torch.tensor(rows)
    out, want = torch.zeros(dest, dtype=torch.uint8), torch.zeros(dest, dtype=torch.uint8)
    fits = torch.ops.prefetch._pack_windows(images, table, chw, out)
    assert fits.tolist() == pack_reference(images, table, chw, want) == [True, False, True, False, False, True]
    assert torch.equal(out, want)
    # On another device than the output: not taken.
    assert torch.ops.prefetch._pack_windows([images[0]], table[:1], chw, out.to("meta")).tolist() == [False]


def test_pack_windows_refuses_a_window_or_destination_outside():
    image = torch.zeros(4, 5, 3, dtype=torch.uint8)
    out = torch.zeros(100, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match=r"row 0's window \(top=3, left=0, height=2, width=1\) is not inside "
                                           r"its image of 4 x 5"):
        torch.ops.prefetch._pack_windows([image], torch.tensor([[0, 4, 5, 3, 0, 2, 1]]), False, out)
    with pytest.raises(RuntimeError, match=r"row 0's destination \(60 bytes at 50\) does not lie inside"):
        torch.ops.prefetch._pack_windows([image], torch.tensor([[50, 4, 5, 0, 0, 4, 5]]), False, out)


# --- decode_jpeg through the fake GPU decoder ------------------------------------------------------

MIXED = ["420", "gray", "cmyk", "progressive_420", "444", "422", "1x1_420", "17x33_420"]


def inside_boxes(data, seed):
    g = torch.Generator().manual_seed(seed)
    boxes = []
    for d in data:
        with Image.open(io.BytesIO(d)) as im:
            W, H = im.size
        h, w = int(torch.randint(1, H + 1, (1,), generator=g)), int(torch.randint(1, W + 1, (1,), generator=g))
        boxes.append([int(torch.randint(0, H - h + 1, (1,), generator=g)),
                      int(torch.randint(0, W - w + 1, (1,), generator=g)), h, w])
    return boxes


@needs_jpeg
@pytest.mark.parametrize("with_boxes", [False, True])
def test_the_fake_gpu_decoder_path_equals_the_cpu_decoder(with_boxes):
    data = [jpeg(n) for n in MIXED]
    boxes = inside_boxes(data, 7) if with_boxes else None
    want = decode_jpeg(data, boxes)
    fake = FakeGpuBackend()
    with gpu_decoders.registered(fake):
        assert prefetch.ops.gpu_jpeg_decoder() == "fake"
        out = decode_jpeg(data, boxes, device="cpu")
    assert out.shapes() == want.shapes()
    assert torch.equal(out.values, want.values) and torch.equal(out.offsets, want.offsets)
    assert (fake.calls, fake.images) == (1, len(data) - 1)  # one call; the CMYK image refused


@needs_jpeg
def test_the_fake_gpu_decoder_on_the_meta_device_decodes_nothing_and_packs_the_shapes():
    data = [jpeg(n) for n in MIXED]
    boxes = inside_boxes(data, 8)
    for pixels in (False, True):
        fake = FakeGpuBackend(pixels=pixels)
        with gpu_decoders.registered(fake):
            out = decode_jpeg(data, boxes, device="meta")
        assert out.values.device.type == "meta" and out.values.numel() == sum(h * w * 3 for *_, h, w in boxes)
        assert out.shapes() == [(h, w, 3) for *_, h, w in boxes] and fake.calls == 1


@needs_jpeg
def test_without_a_registered_fake_a_cpu_device_never_asks_for_a_gpu_decoder(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("no GPU decoder is chosen for a CPU device")

    monkeypatch.setattr(gpu_decoders, "select_gpu_decoder", refuse)
    assert not gpu_decoders.may_serve(torch.device("cpu"))
    decode_jpeg([jpeg("420")], device="cpu")
    assert not prefetch.FusedAugment(MEAN, STD, random_resized_crop=8, decode=True).host_stage_for(
        torch.device("cpu"))


# --- FusedAugment(decode=True) from a packed store -----------------------------------------------

def photo(h, w, seed):
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
    return np.asarray(Image.fromarray(small).resize((w, h), Image.BICUBIC))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store of 40 JPEGs of their own sizes: baseline and progressive, 4:2:0 and 4:4:4, a few
    grayscale, and one CMYK, which the GPU decoders refuse."""
    root = tmp_path_factory.mktemp("store")
    folder = root / "files" / "a"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(5)
    for k in range(40):
        h, w = int(rng.integers(24, 90)), int(rng.integers(24, 90))
        image = Image.fromarray(photo(h, w, k))
        if k % 13 == 5:
            image = image.convert("L")
        if k == 17:
            image = image.convert("CMYK")
        image.save(folder / ("%03d.jpg" % k), "JPEG", quality=85, progressive=k % 3 == 0,
                   subsampling=2 if k % 2 else 0)
    return prefetch.pack(str(root / "files"), str(root / "store"))


def augment():
    return prefetch.FusedAugment(MEAN, STD, random_resized_crop=(20, 16), decode=True, hflip=0.5,
                                 vflip=0.5, seed=9)


@needs_jpeg
def test_the_bench_batches_are_the_array_loaders(store):
    from prefetch.bench.decode_host import store_batches

    with prefetch.ArrayLoader(store.as_arrays(), 16, shuffle=False, device="cpu") as loader:
        delivered = [(images.tensors(), labels) for images, labels in loader]
    made = [host_batch(b) for b in store_batches(store, 16)]
    assert len(made) == len(delivered) == 3
    for (images, labels), (want_images, want_labels) in zip(made, delivered):
        assert torch.equal(labels, want_labels)
        assert [bytes(t.numpy()) for t in images.tensors()] == [bytes(t.numpy()) for t in want_images]


@needs_jpeg
def test_the_host_stage_with_the_fake_gpu_decoder_gives_the_cpu_paths_output(store):
    """Through the loader: the host stage (the fake decoder, the CMYK image on the CPU decoder),
    the windows collated and copied by the engine, apply's resize — against the CPU path, where
    apply decodes and resizes each window in one fused op."""
    results = []
    for fake in (FakeGpuBackend(), None):
        with gpu_decoders.registered(fake) if fake else contextlib.nullcontext():
            aug = augment()
            assert aug.host_stage_for(torch.device("cpu")) == (fake is not None)
            with prefetch.ArrayLoader(store.as_arrays(), 16, shuffle=False, device="cpu", transform=aug,
                                      num_threads=2) as loader:
                results.append([(x.clone(), y.clone()) for x, y in loader])
        if fake:
            assert fake.calls == 3 and fake.images == 39  # one call a batch, CMYK refused
    for (a, la), (b, lb) in zip(*results):
        assert torch.equal(la, lb) and torch.equal(a, b)


def python_calls(fn):
    """Every Python function called and every C function called from Python while ``fn()`` runs
    in this thread, by name (sys.setprofile's "call" and "c_call" events), with the garbage
    collector off (a collection could run a finaliser anywhere)."""
    counts = collections.Counter()

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            counts["%s:%s" % (os.path.basename(code.co_filename), code.co_name)] += 1
        elif event == "c_call":
            counts["C:%s" % getattr(arg, "__qualname__", repr(arg))] += 1

    enabled = gc.isenabled()
    gc.disable()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        if enabled:
            gc.enable()
    return counts


def gpu_path_calls(store, n, device):
    """The Python calls of one batch of ``n`` images on the GPU path: the gather of its encoded
    bytes out of the store (the ArrayLoader's host path hands its producer such a batch), the host
    stage with the fake GPU decoder, and apply on the decoded windows; checked against the CPU path's
    output on the CPU."""
    from prefetch.bench.decode_host import store_batches

    batch = store_batches(store, n, 1)[0]
    aug, position = augment(), BatchPosition(3, 1, 0)
    fake = FakeGpuBackend(pixels=device.type != "meta")
    out = {}

    def path():
        host = aug.host_apply(host_batch(batch), position, device)
        out["host"] = host
        if device.type != "meta":
            out["images"] = aug.apply(host, position)[0]

    with gpu_decoders.registered(fake):
        path()  # warm: first-call caches and imports
        calls = python_calls(path)
    cmyk = 1 if n > 17 else 0  # file 17, refused: the CPU decoder takes it
    assert fake.calls == 2 and fake.images == 2 * (n - cmyk)
    if device.type != "meta":
        encoded = host_batch(batch)
        want = aug.apply(encoded, position)[0]  # the CPU path: decode_resized_crop
        assert torch.equal(out["images"], want)
    return calls


@needs_jpeg
@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("sizes", [(4, 16), (20, 40)], ids=["all-on-the-gpu", "one-refused"])
def test_the_gpu_path_makes_no_python_call_per_image(store, device, sizes):
    """Batches of the first n images of the store: without the CMYK image (file 17), and with it
    (refused by the GPU decoder's screen, decoded by the CPU decoder in the same batch)."""
    device = torch.device(device)
    small, large = (gpu_path_calls(store, n, device) for n in sizes)
    grown = {k: (small.get(k, 0), large.get(k, 0)) for k in set(small) | set(large)
             if small.get(k, 0) != large.get(k, 0)}
    assert grown == {}, "calls that grow with the batch (4 images, 32 images): %s" % grown
    assert sum(large.values()) < 1500  # and a batch's own calls stay few (~700 here)
