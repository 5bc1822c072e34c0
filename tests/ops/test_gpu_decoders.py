"""GPU JPEG decoders (prefetch/ops/gpu_decoders.py, gpu_backends.py, gpu_streams.py,
jpeg_headers.py) and decode_jpeg's path through them.

On the CPU, with fake backends: the choice of backend (order, argument, PREFETCH_GPU_JPEG_DECODER,
cache), the real backends' checks against fake torchvision / TorchCodec modules, the header screen,
the per-image fallback to the CPU decoder (results equal the CPU decoder's, in order, boxes cut;
one failed batched call at most; the CPU decoder's errors), and the stream operations around a
decode. On a GPU: a mixed batch against the CPU decoder, and the stream safety itself."""
import enum
import importlib.abc
import importlib.machinery
import io
import struct
import sys
import types
import warnings

import pytest
import torch

import prefetch
from prefetch import Ragged
from prefetch.ops import decode, gpu_backends, gpu_decoders, gpu_streams
from prefetch.ops.gpu_backends import (CpuBackend, GpuJpegBackend, TorchCodecBackend,
                                       TorchvisionBackend)
from prefetch.ops.jpeg_headers import JpegLayout, jpeg_layout
from prefetch.ops import decode_jpeg, decode_resized_crop, resized_crop

from ..conftest import require_cuda
from .test_decode import CASES, bad_streams, jpeg

Image = pytest.importorskip("PIL.Image")

pytestmark = pytest.mark.skipif(not prefetch.built_with_jpeg(),
                                reason="the fallback is prefetch's CPU decoder (libjpeg-turbo)")

ENV = gpu_decoders.ENV_VAR
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _fresh_choice(monkeypatch):
    """Every test starts without a cached choice, a disabled backend or the variable set."""
    monkeypatch.delenv(ENV, raising=False)
    gpu_decoders.clear_cache()
    yield
    gpu_decoders.clear_cache()


# --- fake backends -------------------------------------------------------------------------------

def layout_of(image):
    return jpeg_layout(memoryview(image.numpy()))


class Fake(GpuJpegBackend):
    """Decodes with prefetch's CPU decoder (so results can be compared exactly) and records each
    call's images. ``fail`` (a predicate on an image's layout) makes a call raise when any image
    of it matches, as nvJPEG's batched call fails the whole list; ``screen`` keeps the nvJPEG
    screen of GpuJpegBackend.refuses (else nothing is refused up front)."""

    def __init__(self, name="fake", usable=True, fail=None, screen=False, transform=None):
        super().__init__()
        self.name, self.usable, self.fail, self.screen = name, usable, fail, screen
        self.transform = transform
        self.calls = []
        self.loads = 0

    def _load(self):
        self.loads += 1
        if not self.usable:
            raise ImportError("no module named %s" % self.name)

    def refuses(self, layout):
        return super().refuses(layout) if self.screen else None

    def decode_batch(self, images, device):
        self.calls.append([im.data_ptr() for im in images])
        if self.fail is not None and any(self.fail(layout_of(im)) for im in images):
            raise RuntimeError("nvJPEG: unsupported image in the batch")
        out = decode_jpeg(list(images)).tensors()
        out = [t.permute(2, 0, 1).contiguous().permute(1, 2, 0).to(device) for t in out]  # CHW views
        return [self.transform(n, t) for n, t in enumerate(out)] if self.transform else out


def is_cmyk(layout):
    return layout.components == 4


def names_of(backends):
    return [b.name for b in backends]


MIXED = ["420", "gray", "cmyk", "progressive_420", "444", "422"]


def mixed(names=MIXED):
    return [jpeg(n) for n in names]


def inside_boxes(data, seed=0):
    """A box per image, inside it, touching an edge for some."""
    g = torch.Generator().manual_seed(seed)
    boxes = []
    for k, d in enumerate(data):
        with Image.open(io.BytesIO(d)) as im:
            W, H = im.size
        h = int(torch.randint(1, H + 1, (1,), generator=g))
        w = int(torch.randint(1, W + 1, (1,), generator=g))
        t = H - h if k % 3 == 0 else int(torch.randint(0, H - h + 1, (1,), generator=g))
        l = W - w if k % 3 == 1 else int(torch.randint(0, W - w + 1, (1,), generator=g))
        boxes.append([t, l, h, w])
    return boxes


def with_backend(backend, r, boxes=None, device=CPU):
    """decode_with_backend's result as the Ragged decode_jpeg makes of it."""
    values, offsets, sizes = decode.decode_with_backend(r, boxes, device, backend)
    assert offsets.device.type == sizes.device.type == "cpu"  # the tables stay on the host
    return Ragged(values, offsets, sizes, shapes=sizes.tolist(), dense=True)


def through(backend, data, boxes=None):
    return with_backend(backend, decode.encoded_batch(data), boxes)


def assert_same(out, ref):
    assert isinstance(out, Ragged) and out.shapes() == ref.shapes()
    assert torch.equal(out.values, ref.values)
    assert torch.equal(out.offsets.cpu(), ref.offsets) and torch.equal(out.sizes.cpu(), ref.sizes)
    for a, b in zip(out.tensors(), ref.tensors()):
        assert torch.equal(a, b)


# --- the choice ----------------------------------------------------------------------------------

def test_auto_chooses_the_first_available_backend_once(monkeypatch):
    a, b, c = Fake("a", usable=False), Fake("b"), Fake("c")
    monkeypatch.setattr(gpu_decoders, "BACKENDS", [a, b, c, CpuBackend()])
    for _ in range(3):
        assert gpu_decoders.select_gpu_decoder() is b
        assert decode.gpu_jpeg_decoder() == "b"
    assert (a.loads, b.loads, c.loads) == (1, 1, 0)  # cached: no import after the first
    assert a.why == "ImportError: no module named a"
    monkeypatch.setattr(gpu_decoders, "BACKENDS", [a, CpuBackend()])
    assert decode.gpu_jpeg_decoder() == "cpu"  # another list is another choice
    assert a.loads == 1


def test_the_argument_and_the_variable_choose(monkeypatch):
    b, c = Fake("b"), Fake("c")
    monkeypatch.setattr(gpu_decoders, "BACKENDS", [b, c, CpuBackend()])
    monkeypatch.setenv(ENV, "c")
    assert decode.gpu_jpeg_decoder() == "c"
    assert decode.gpu_jpeg_decoder("b") == "b"  # the argument wins over the variable
    monkeypatch.setenv(ENV, " CPU ")
    assert decode.gpu_jpeg_decoder() == "cpu"  # a changed variable is a new choice
    monkeypatch.setenv(ENV, "auto")
    assert decode.gpu_jpeg_decoder() == "b"
    assert decode.gpu_jpeg_decoder("Auto") == "b"


def test_an_unknown_name_is_refused_with_the_choices(monkeypatch):
    monkeypatch.setenv(ENV, "nvimagecodec")
    with pytest.raises(ValueError, match=r"PREFETCH_GPU_JPEG_DECODER=nvimagecodec names no GPU JPEG "
                                         r"decoder; choose one of auto, torchcodec, torchvision, cpu"):
        decode.gpu_jpeg_decoder()
    with pytest.raises(ValueError, match=r"gpu_decoder='dali' names no GPU JPEG decoder"):
        decode.gpu_jpeg_decoder("dali")


def test_a_chosen_backend_that_cannot_be_used_says_why(monkeypatch):
    monkeypatch.setattr(gpu_decoders, "BACKENDS", [Fake("a", usable=False), CpuBackend()])
    with pytest.raises(RuntimeError, match=r"gpu_decoder='a', but a cannot be used here "
                                           r"\(ImportError: no module named a\)"):
        decode.gpu_jpeg_decoder("a")
    monkeypatch.setenv(ENV, "a")
    with pytest.raises(RuntimeError, match=r"PREFETCH_GPU_JPEG_DECODER=a, but a cannot be used"):
        decode.decode_jpeg(mixed()[:1], device="cuda")  # before anything touches CUDA


def test_here_without_torchcodec_or_torchvision_the_cpu_decoder_is_chosen():
    for name in ("torchcodec", "torchvision"):
        try:
            __import__(name)
            pytest.skip("%s is installed here" % name)
        except Exception:  # noqa: BLE001
            pass
    assert prefetch.ops.gpu_jpeg_decoder() == "cpu"
    assert "torchcodec" in gpu_decoders.BACKENDS[0].why and "torchvision" in gpu_decoders.BACKENDS[1].why


def test_the_public_function_is_in_prefetch_ops():
    assert prefetch.ops.gpu_jpeg_decoder is decode.gpu_jpeg_decoder
    assert "gpu_jpeg_decoder" in prefetch.ops.__all__


# --- the real backends against fake modules ------------------------------------------------------

class ReadMode(enum.Enum):
    UNCHANGED = 0
    GRAY = 1
    RGB = 3


def fake_torchvision(monkeypatch, version="0.26.0+cu130", calls=None):
    tv = types.ModuleType("torchvision")
    tv.__version__ = version
    tv_io = types.ModuleType("torchvision.io")

    def decode_jpeg(input, mode=ReadMode.UNCHANGED, device="cpu", apply_exif_orientation=False):
        calls.append((input, mode, device))
        return [torch.arange(2 * 3 * 5, dtype=torch.uint8).view(3, 2, 5) for _ in input]

    tv_io.decode_jpeg, tv_io.ImageReadMode, tv.io = decode_jpeg, ReadMode, tv_io
    monkeypatch.setitem(sys.modules, "torchvision", tv)
    monkeypatch.setitem(sys.modules, "torchvision.io", tv_io)


def fake_torchcodec(monkeypatch, with_device=True, calls=None):
    tc = types.ModuleType("torchcodec")
    decoders = types.ModuleType("torchcodec.decoders")
    if with_device:
        def decode_jpeg(source, *, mode="RGB", output_dtype=torch.uint8, device="cpu"):
            calls.append((source, mode, device))
            return [torch.arange(2 * 3 * 5, dtype=torch.uint8).view(3, 2, 5) for _ in source]
    else:  # TorchCodec before 0.16 had no CUDA JPEG decoding
        def decode_jpeg(source, *, mode="RGB"):
            raise AssertionError("not called")
    decoders.decode_jpeg, tc.decoders = decode_jpeg, decoders
    monkeypatch.setitem(sys.modules, "torchcodec", tc)
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", decoders)


def test_the_torchvision_backend_calls_decode_jpeg_with_a_list_in_rgb(monkeypatch):
    calls = []
    fake_torchvision(monkeypatch, calls=calls)
    fresh = TorchvisionBackend()  # decode_batch checks availability itself
    assert tuple(fresh.decode_batch([torch.zeros(3, dtype=torch.uint8)], torch.device("cuda", 0))[0].shape) == (3, 2, 5)
    calls.clear()
    backend = TorchvisionBackend()
    assert backend.available() and backend.why is None
    images = [torch.zeros(7, dtype=torch.uint8), torch.ones(9, dtype=torch.uint8)]
    out = backend.decode_batch(images, torch.device("cuda", 1))
    (given, mode, device), = calls
    assert isinstance(given, list) and all(a is b for a, b in zip(given, images))  # no copies
    assert mode is ReadMode.RGB and device == torch.device("cuda", 1)
    # What decode_jpeg returned, as it is: CHW images, cut and packed later in one C++ call.
    chw = torch.arange(30, dtype=torch.uint8).view(3, 2, 5)
    assert backend.layout == "CHW"
    assert [tuple(t.shape) for t in out] == [(3, 2, 5)] * 2 and torch.equal(out[0], chw)


def test_torchvision_before_0_20_decodes_one_image_per_call_and_is_not_used(monkeypatch):
    fake_torchvision(monkeypatch, version="0.19.1", calls=[])
    backend = TorchvisionBackend()
    assert not backend.available() and "0.20" in backend.why


def test_the_torchcodec_backend_calls_decode_jpeg_with_a_list_in_rgb(monkeypatch):
    calls = []
    fake_torchcodec(monkeypatch, calls=calls)
    backend = TorchCodecBackend()
    assert backend.available()
    images = [torch.zeros(7, dtype=torch.uint8)]
    out = backend.decode_batch(images, torch.device("cuda", 0))
    (given, mode, device), = calls
    assert given == images and given[0] is images[0] and mode == "RGB"
    assert device == torch.device("cuda", 0) and tuple(out[0].shape) == (3, 2, 5)
    assert backend.layout == "CHW"


def test_torchcodec_without_cuda_jpeg_decoding_is_not_used(monkeypatch):
    fake_torchcodec(monkeypatch, with_device=False)
    backend = TorchCodecBackend()
    assert not backend.available() and "0.16" in backend.why


class _FailingImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``name`` and fails while executing it, as a library whose shared objects are missing."""

    def __init__(self, name, error):
        self.name, self.error = name, error

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise self.error


@pytest.mark.parametrize("error", [OSError("libavutil.so.59: cannot open shared object file"),
                                   RuntimeError("Could not load libtorchcodec"), ImportError("x")])
def test_any_import_failure_means_not_available(monkeypatch, error):
    for name in ("torchcodec", "torchcodec.decoders", "torchvision", "torchvision.io"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "meta_path", [_FailingImport("torchcodec", error),
                                           _FailingImport("torchvision", error)] + sys.meta_path)
    codec, vision = TorchCodecBackend(), TorchvisionBackend()
    assert not codec.available() and not vision.available()
    assert type(error).__name__ in codec.why and str(error) in vision.why
    monkeypatch.setattr(gpu_decoders, "BACKENDS", [codec, vision, CpuBackend()])
    assert decode.gpu_jpeg_decoder() == "cpu"


# --- what the headers say ------------------------------------------------------------------------

def test_jpeg_layout_reads_what_pillow_wrote():
    for name, (H, W, mode, save) in CASES.items():
        layout = jpeg_layout(jpeg(name))
        assert (layout.height, layout.width, layout.precision) == (H, W, 8), name
        assert layout.components == {"L": 1, "CMYK": 4}.get(mode, 3), name
        assert layout.sof == (0xC2 if save.get("progressive") else 0xC0), name
        assert layout.orientation is None and not layout.rgb_coded, name
    cmyk = jpeg_layout(jpeg("cmyk"))
    assert cmyk.adobe_transform is not None and not cmyk.jfif
    assert jpeg_layout(jpeg("420")).jfif and jpeg_layout(jpeg("420")).component_ids == (1, 2, 3)


def with_segment(data, marker, payload):
    """``data`` with one more segment right after SOI."""
    return data[:2] + bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload + data[2:]


def exif(orientation, order="<"):
    tiff = (b"II" if order == "<" else b"MM") + struct.pack(order + "HI", 42, 8)
    entries = [(0x010F, 2, 4, b"ab\0\0"), (0x0112, 3, 1, struct.pack(order + "HH", orientation, 0))]
    tiff += struct.pack(order + "H", len(entries))
    for tag, kind, count, value in entries:
        tiff += struct.pack(order + "HHI", tag, kind, count) + value
    return b"Exif\0\0" + tiff + struct.pack(order + "I", 0)


@pytest.mark.parametrize("order", ["<", ">"])
def test_jpeg_layout_reads_the_exif_orientation(order):
    data = with_segment(jpeg("420"), 0xE1, exif(6, order))
    assert jpeg_layout(data).orientation == 6
    assert decode_jpeg([data]).shapes() == [(45, 70, 3)]  # the CPU decoder keeps the stored layout
    # Pillow's own EXIF writer too.
    with Image.open(io.BytesIO(jpeg("444"))) as im:
        tags = Image.Exif()
        tags[0x0112] = 8
        f = io.BytesIO()
        im.save(f, "JPEG", exif=tags)
    assert jpeg_layout(f.getvalue()).orientation == 8


def test_jpeg_layout_of_broken_streams_says_what_it_could_read():
    whole = jpeg("420")
    for cut in range(len(whole[:700])):
        layout = jpeg_layout(whole[:cut])  # never raises, never reads past the end
        assert layout.sof in (None, 0xC0)
    for stream in bad_streams().values():
        jpeg_layout(stream)
    assert jpeg_layout(b"") == JpegLayout() and jpeg_layout(b"\xff\xd8\xff") == JpegLayout()
    # A view of one sample inside a batch's bytes stops at the sample's end.
    batch = whole + jpeg("gray")
    assert jpeg_layout(batch, len(whole), len(batch) - len(whole)).components == 1


def test_what_the_nvjpeg_backends_refuse():
    base = jpeg_layout(jpeg("420"))
    vision, codec = TorchvisionBackend(), TorchCodecBackend()
    for backend in (vision, codec):
        assert backend.refuses(base) is None
        assert backend.refuses(jpeg_layout(jpeg("progressive_gray"))) is None
        assert "CMYK" in backend.refuses(jpeg_layout(jpeg("cmyk")))
        assert "arithmetic" in backend.refuses(base._replace(sof=0xC9))
        assert "12-bit" in backend.refuses(base._replace(precision=12))
        assert "RGB" in backend.refuses(base._replace(jfif=False, adobe_transform=0))
        assert "RGB" in backend.refuses(base._replace(jfif=False, component_ids=(82, 71, 66)))
        assert backend.refuses(base._replace(jfif=False, adobe_transform=1)) is None
        assert backend.refuses(JpegLayout()) is not None
    # TorchCodec applies the EXIF orientation, which prefetch's decoders do not.
    assert "EXIF orientation 6" in codec.refuses(base._replace(orientation=6))
    assert codec.refuses(base._replace(orientation=1)) is None
    assert vision.refuses(base._replace(orientation=6)) is None
    assert CpuBackend().refuses(base) is not None


# --- the fallback: equal to the CPU decoder, image by image --------------------------------------

@pytest.mark.parametrize("with_boxes", [False, True])
def test_a_batch_the_gpu_decodes_whole_equals_the_cpu_decoder(with_boxes):
    data = mixed(["420", "gray", "progressive_420", "444", "422", "1x1_420", "17x33_420"])
    boxes = inside_boxes(data) if with_boxes else None
    backend = Fake()
    out = through(backend, data, boxes)
    assert_same(out, decode_jpeg(data, boxes))
    assert len(backend.calls) == 1 and len(backend.calls[0]) == len(data)


def test_the_backend_reads_the_batch_in_place():
    data = mixed()
    r = Ragged.from_tensors([torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in data])
    backend = Fake()
    with_backend(backend, r)
    base, offsets = r.values.data_ptr(), r.offsets.tolist()
    assert backend.calls == [[base + o for o in offsets]]


def test_one_image_the_batched_call_fails_on_costs_one_failed_call():
    data = mixed()  # CMYK at index 2; nothing screened, as if nvJPEG were asked
    boxes = inside_boxes(data, seed=1)
    backend = Fake(fail=is_cmyk)
    out = through(backend, data, boxes)
    assert_same(out, decode_jpeg(data, boxes))
    # One batched call that fails, then each image alone; the CMYK one fails and goes to the CPU.
    assert [len(c) for c in backend.calls] == [6] + [1] * 6


def test_what_the_screen_refuses_never_reaches_the_gpu():
    data = mixed()
    boxes = inside_boxes(data, seed=2)
    backend = Fake(fail=is_cmyk, screen=True)
    out = through(backend, data, boxes)
    assert_same(out, decode_jpeg(data, boxes))
    assert [len(c) for c in backend.calls] == [5]  # no failed call at all


def test_a_batch_the_gpu_refuses_entirely_is_decoded_by_the_cpu():
    data = [jpeg("cmyk"), jpeg("cmyk_large")]
    boxes = [[1, 2, 3, 4], [0, 0, 70, 45]]
    backend = Fake(screen=True)
    assert_same(through(backend, data, boxes), decode_jpeg(data, boxes))
    assert backend.calls == []


def test_an_output_that_disagrees_with_its_header_goes_to_the_cpu():
    """E.g. an EXIF rotation the screen did not see: the output's shape is not the header's."""
    data = mixed(["420", "444", "gray"])
    transposed = Fake(transform=lambda n, t: t.transpose(0, 1) if n == 1 else t)
    assert_same(through(transposed, data), decode_jpeg(data))
    wrong_dtype = Fake(transform=lambda n, t: t.float() if n == 0 else t)
    assert_same(through(wrong_dtype, data), decode_jpeg(data))


def test_a_backend_returning_too_few_images_is_retried_image_by_image():
    data = mixed(["420", "444"])

    class Short(Fake):
        def decode_batch(self, images, device):
            return super().decode_batch(images, device)[:1]

    backend = Short()
    assert_same(through(backend, data), decode_jpeg(data))
    assert [len(c) for c in backend.calls] == [2, 1, 1]


def test_a_gappy_ragged_and_every_list_kind_give_the_same_result():
    data = mixed()
    boxes = inside_boxes(data, seed=3)
    want = decode_jpeg(data, boxes)
    padded = bytearray()
    offsets = []
    for d in data:
        padded += b"\0" * 3
        offsets.append(len(padded))
        padded += d
    values = torch.frombuffer(padded, dtype=torch.uint8)
    gappy = Ragged(values, torch.tensor(offsets), torch.tensor([[len(d)] for d in data]))
    as_tensors = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in data]
    for given in (gappy, as_tensors, [bytearray(d) for d in data], tuple(data)):
        assert_same(with_backend(Fake(fail=is_cmyk, screen=True), decode.encoded_batch(given), boxes), want)
    assert_same(through(Fake(), data, torch.tensor(boxes, dtype=torch.int16)), want)


# --- errors are the CPU decoder's ----------------------------------------------------------------

def cpu_error(data, boxes=None):
    with pytest.raises(RuntimeError) as info:
        decode_jpeg(data, boxes)
    return str(info.value)


@pytest.mark.parametrize("kind", ["empty", "not_a_jpeg", "png_magic", "only_soi", "header_only",
                                  "garbage_after_soi"])
def test_a_header_the_cpu_cannot_read_raises_its_error_before_any_gpu_call(kind):
    data = mixed()
    data[3] = bad_streams()[kind]
    backend = Fake()
    with pytest.raises(RuntimeError, match=r"decode_jpeg: sample 3\b") as info:
        through(backend, data)
    assert str(info.value) == cpu_error(data)
    assert backend.calls == []


@pytest.mark.parametrize("kind", ["truncated_scan", "truncated_last_bytes", "truncated_progressive"])
@pytest.mark.parametrize("screen", [False, True])
def test_a_stream_both_decoders_fail_on_names_its_sample_as_the_cpu_does(kind, screen):
    data = mixed()
    data[3] = bad_streams()[kind]
    with pytest.raises(RuntimeError, match=r"decode_jpeg: sample 3\b") as info:
        through(Fake(screen=screen), data)
    assert str(info.value) == cpu_error(data)
    # The next call works.
    assert_same(through(Fake(screen=screen), mixed()), decode_jpeg(mixed()))


@pytest.mark.parametrize("box", [(-1, 0, 5, 5), (0, 0, 0, 5), (0, 0, 46, 70), (45, 0, 1, 1),
                                 (40, 60, 5, 11), (2 ** 62, 0, 1, 1), (1, 1, 2 ** 63 - 1, 1)])
def test_a_box_outside_its_image_raises_the_cpu_decoders_error_before_decoding(box):
    data = mixed()
    data[3] = jpeg("420")  # 45 x 70
    boxes = [[0, 0, 1, 1]] * len(data)
    boxes[3] = list(box)
    backend = Fake()
    with pytest.raises(RuntimeError, match=r"boxes\[3\].*sample 3's image of H x W = 45 x 70") as info:
        through(backend, data, torch.tensor(boxes))
    assert str(info.value) == cpu_error(data, torch.tensor(boxes))
    assert backend.calls == []


@pytest.mark.parametrize("boxes", [torch.zeros(6, 4), torch.zeros(5, 4, dtype=torch.int64),
                                   torch.zeros(6, 3, dtype=torch.int64)])
def test_boxes_that_are_not_integer_n_by_4_raise_the_cpu_decoders_error(boxes):
    backend = Fake()
    with pytest.raises(RuntimeError) as info:
        through(backend, mixed(), boxes)
    assert str(info.value) == cpu_error(mixed(), boxes)
    assert backend.calls == []


# --- a broken backend ----------------------------------------------------------------------------

def test_a_backend_failing_on_every_image_of_a_batch_is_replaced_by_the_cpu(monkeypatch):
    broken = Fake("broken", fail=lambda layout: True)
    monkeypatch.setattr(gpu_decoders, "BACKENDS", [broken, CpuBackend()])
    assert decode.gpu_jpeg_decoder() == "broken"
    data = mixed(["420", "444", "gray"])
    with pytest.warns(RuntimeWarning, match=r"broken failed on all 3 images of a batch, each alone "
                                            r"too.*decoded on the CPU from now on"):
        assert_same(through(broken, data), decode_jpeg(data))
    assert decode.gpu_jpeg_decoder() == "cpu"
    assert decode.gpu_jpeg_decoder("broken") == "cpu"  # even when named: it was warned about
    assert "broken disabled" in gpu_decoders.describe()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        through(broken, data)  # said once


def test_one_failing_image_or_a_corrupt_batch_disables_nothing(monkeypatch):
    backend = Fake("flaky", fail=lambda layout: True)
    monkeypatch.setattr(gpu_decoders, "BACKENDS", [backend, CpuBackend()])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_same(through(backend, mixed(["420"])), decode_jpeg(mixed(["420"])))
        data = [bad_streams()["truncated_scan"]] * 2
        with pytest.raises(RuntimeError, match=r"sample (0|1)\b"):  # either: decoded in parallel
            through(backend, data)
    assert decode.gpu_jpeg_decoder() == "flaky"


# --- the streams around a decode ---------------------------------------------------------------

class Recorder:
    """Stands for gpu_streams._streams: records each stream operation in order."""

    def __init__(self):
        self.log = []
        self.current_stream = "caller"

    def current(self, device):
        self.log.append(("current", device))
        return self.current_stream

    def side(self, device):
        self.log.append(("side", device))
        return "side"

    def use(self, stream):
        recorder = self

        class Use:
            def __enter__(self):
                recorder.log.append(("enter", stream))
                recorder.before, recorder.current_stream = recorder.current_stream, stream

            def __exit__(self, *exc):
                recorder.log.append(("exit", stream))
                recorder.current_stream = recorder.before

        return Use()

    def synchronize(self, stream):
        self.log.append(("synchronize", stream))

    def protect(self, tensor, stream):
        self.log.append(("protect", tensor.data_ptr(), stream))

    def wait(self, stream, other):
        self.log.append(("wait", stream, other))


def test_the_backend_runs_on_an_idle_side_stream_read_there_and_one_output_is_protected(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(gpu_streams, "_streams", recorder)
    cuda1 = torch.device("cuda", 1)

    class Seen(Fake):
        def decode_batch(self, images, device):
            recorder.log.append(("decode", len(images), recorder.current_stream))
            return super().decode_batch(images, CPU)

    packed = torch.zeros(5, dtype=torch.uint8)

    def read(outputs, errors):
        recorder.log.append(("read", [o is None for o in outputs], recorder.current_stream))
        return packed

    data = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in mixed()]
    result, errors = gpu_streams.decode_on_device(Seen(fail=is_cmyk), data, cuda1, read)
    assert result is packed
    assert isinstance(errors[2], RuntimeError) and errors[:2] == [None, None]
    assert recorder.log[:5] == [("current", cuda1), ("side", cuda1), ("synchronize", "side"),
                                ("enter", "side"), ("decode", 6, "side")]
    assert recorder.log[5:11] == [("decode", 1, "side")] * 6  # every call on the side stream
    # The pixels final, then read on the side stream; the caller's stream waits for it, and the
    # one tensor read made is protected for the caller's stream (none per image).
    assert recorder.log[11:] == [("synchronize", "side"),
                                 ("read", [False, False, True, False, False, False], "side"),
                                 ("exit", "side"), ("wait", "caller", "side"),
                                 ("protect", packed.data_ptr(), "caller")]


@pytest.mark.parametrize("where", ["decode", "read"])
def test_the_side_stream_is_synchronized_when_the_backend_or_the_read_raises(monkeypatch, where):
    recorder = Recorder()
    monkeypatch.setattr(gpu_streams, "_streams", recorder)

    class Interrupted(Fake):
        def decode_batch(self, images, device):
            if where == "decode":
                raise KeyboardInterrupt  # not an Exception: not retried, but the stream is left idle
            return [torch.zeros(1, 1, 3, dtype=torch.uint8)]

    def read(outputs, errors):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        gpu_streams.decode_on_device(Interrupted(), [torch.zeros(3, dtype=torch.uint8)],
                                     torch.device("cuda", 0), read)
    assert recorder.log[-2:] == [("exit", "side"), ("synchronize", "side")]
    assert not any(entry[0] in ("wait", "protect") for entry in recorder.log)


def test_a_cpu_device_makes_no_stream_operation(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(gpu_streams, "_streams", recorder)
    through(Fake(), mixed())
    assert recorder.log == []


# --- prefetch.info's line ------------------------------------------------------------------------

def installed(monkeypatch, **versions):
    monkeypatch.setattr(gpu_backends, "_installed_version", lambda package: versions.get(package))


def test_describe_names_the_backend_from_what_is_installed(monkeypatch):
    monkeypatch.setattr(gpu_decoders, "BACKENDS", [TorchCodecBackend(), TorchvisionBackend(), CpuBackend()])
    installed(monkeypatch, torchvision="0.26.0+cu130")
    assert gpu_decoders.describe() == "torchvision 0.26.0+cu130 (nvJPEG)"
    installed(monkeypatch, torchvision="0.26.0", torchcodec="0.16.0")
    assert gpu_decoders.describe() == "torchcodec 0.16.0 (nvJPEG)"
    installed(monkeypatch, torchvision="0.19.0", torchcodec="0.15.1")
    assert gpu_decoders.describe() == ("cpu (torchcodec 0.15.1 is older than 0.16; torchvision 0.19.0 "
                                       "is older than 0.20)")
    installed(monkeypatch)
    assert gpu_decoders.describe() == "cpu (torchcodec is not installed; torchvision is not installed)"
    installed(monkeypatch, torchvision="0.26.0")
    monkeypatch.setenv(ENV, "cpu")
    assert gpu_decoders.describe() == ("cpu (prefetch's libjpeg-turbo decoder, then a copy to the "
                                       "device; chosen by PREFETCH_GPU_JPEG_DECODER=cpu)")
    monkeypatch.setenv(ENV, "torchcodec")
    assert gpu_decoders.describe().startswith("torchcodec cannot be used (torchcodec is not installed")


def test_describe_imports_nothing(monkeypatch):
    """Installed but never imported: describe() reads versions only."""
    imports = []
    for cls in (TorchCodecBackend, TorchvisionBackend):
        monkeypatch.setattr(cls, "_load", lambda self: imports.append(self.name))
    monkeypatch.setattr(gpu_decoders, "BACKENDS", [TorchCodecBackend(), TorchvisionBackend(), CpuBackend()])
    installed(monkeypatch, torchvision="0.26.0")
    assert gpu_decoders.describe() == "torchvision 0.26.0 (nvJPEG)"
    assert imports == []


def test_describe_says_when_an_installed_library_failed_to_import(monkeypatch):
    def missing_library(self):
        raise OSError("libnvjpeg.so.13")

    vision = TorchvisionBackend()
    monkeypatch.setattr(TorchvisionBackend, "_load", missing_library)
    monkeypatch.setattr(gpu_decoders, "BACKENDS", [vision, CpuBackend()])
    installed(monkeypatch, torchvision="0.26.0")
    assert not vision.available()
    assert gpu_decoders.describe() == "cpu (torchvision 0.26.0 fails to import: OSError: libnvjpeg.so.13)"


# --- on a GPU ------------------------------------------------------------------------------------

GPU_MIXED = ["420", "444", "422", "420_large", "progressive_420", "progressive_444", "gray",
             "progressive_gray", "cmyk", "cmyk_large", "restart_blocks_420", "17x33_420"]


def _torchvision_cuda_decode(data, device):
    from torchvision.io import ImageReadMode, decode_jpeg
    encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device).permute(1, 2, 0)


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["auto", "torchcodec", "torchvision", "cpu"])
def test_on_a_gpu_a_mixed_batch_is_close_to_the_cpu_decoder(name):
    require_cuda()
    try:
        chosen = prefetch.ops.gpu_jpeg_decoder(name)
    except RuntimeError as exc:
        pytest.skip(str(exc))
    device = torch.device("cuda", torch.cuda.current_device())
    data = [jpeg(n) for n in GPU_MIXED]
    for boxes in (None, inside_boxes(data, seed=4)):
        want = decode_jpeg(data, boxes)
        out = decode_jpeg(data, boxes, device=device, gpu_decoder=name)
        assert out.device == device and out.sizes.device == device and out.shapes() == want.shapes()
        torch.cuda.synchronize()
        for n, (a, b) in enumerate(zip(out.tensors(), want.tensors())):
            diff = (a.cpu().int() - b.int()).abs().float()
            if chosen == "cpu" or "cmyk" in GPU_MIXED[n]:  # decoded by the CPU decoder
                assert torch.equal(a.cpu(), b), (chosen, GPU_MIXED[n])
            else:  # nvJPEG's IDCT and chroma upsampling differ from libjpeg's: 6.5 levels on
                # average for the noisy 4:2:0 image on an H200, 10.05 for the 17x33 4:2:0 one
                # (2026-11-27: most of its pixels are next to an edge, where the upsampling
                # differs most), torchvision's own decode as far; a wrong picture is ~100 apart
                assert diff.mean() < 16, (chosen, GPU_MIXED[n], diff.mean())
                # The decoder's own pixels exactly (unless it refused the image: then the CPU's).
                if chosen == "torchvision" and boxes is None and diff.max() > 0:
                    assert torch.equal(a, _torchvision_cuda_decode(data[n], device)), GPU_MIXED[n]
    # decode_resized_crop goes through the same decoder.
    boxes = inside_boxes(data, seed=5)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    got = decode_resized_crop(data, boxes, (16, 16), mean, std, device=device, gpu_decoder=name)
    whole = torch.tensor([[0, 0, b[2], b[3]] for b in boxes])
    want = resized_crop(decode_jpeg(data, boxes), whole, (16, 16), mean, std)
    assert (got.cpu() - want).abs().mean() < 4 / 255 / min(std)


@pytest.mark.cuda
def test_on_a_gpu_the_decode_never_writes_memory_the_callers_stream_still_reads():
    """pytorch/vision PR 9606's reproduction: blocks freed while kernels queued on the caller's
    stream still read them must not be written by the decoder before those kernels ran."""
    require_cuda()
    device = torch.device("cuda", torch.cuda.current_device())
    data = [jpeg("420_large")] * 4 + [jpeg("progressive_420")] * 2 + [jpeg("cmyk")]
    nbytes = [h * w * 3 for h, w, _ in decode_jpeg(data).shapes()]
    corrupted = 0
    for iteration in range(20):
        fills = [torch.full((n,), 7, dtype=torch.uint8, device=device) for n in nbytes * 4]
        torch.cuda.synchronize()
        torch.cuda._sleep(50_000_000)  # the reads below wait behind this
        sums = [t.sum(dtype=torch.int64) for t in fills]
        del fills  # freed while their reads are still queued
        out = decode_jpeg(data, device=device)
        torch.cuda.synchronize()
        corrupted += sum(int(s) != 7 * n for s, n in zip(sums, nbytes * 4))
        assert out.shapes() == decode_jpeg(data).shapes()
    assert corrupted == 0, "%d reductions read pixels the decoder wrote early" % corrupted


@pytest.mark.cuda
def test_on_a_gpu_a_side_stream_reading_right_after_the_decode_sees_the_final_pixels():
    require_cuda()
    device = torch.device("cuda", torch.cuda.current_device())
    data = [jpeg(n) for n in GPU_MIXED]
    want = decode_jpeg(data, device=device)
    torch.cuda.synchronize()
    want = want.values.cpu()
    side = torch.cuda.Stream(device=device)
    for _ in range(5):
        torch.cuda._sleep(50_000_000)  # the caller's stream is busy while the decode is called
        out = decode_jpeg(data, device=device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            seen = out.values.clone()
            out.values.record_stream(side)
        side.synchronize()
        assert torch.equal(seen.cpu(), want)
