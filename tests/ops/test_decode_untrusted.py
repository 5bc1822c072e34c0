"""JPEG bytes are untrusted input: what prefetch's decoder does with corrupt data, decompression
bombs and unusual colour layouts, against Pillow (the reference for every pixel it returns)."""
import io
import resource
import warnings

import numpy as np
import pytest
import torch

import prefetch
from prefetch.ops import (DecompressionBombWarning, decode_jpeg, decode_resized_crop, jpeg_sizes,
                          max_image_pixels, set_max_image_pixels)
from prefetch.ops import decode, gpu_decoders

from ..conftest import SANITIZED

Image = pytest.importorskip("PIL.Image")
pytestmark = pytest.mark.skipif(not prefetch.built_with_jpeg(), reason="built without libjpeg-turbo")


def encode(pixels, **kwargs):
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", **kwargs)
    return bytes(buf.getvalue())


def photo(h=128, w=128, seed=0):
    """Blocky noise: enough entropy-coded data for a corruption to land anywhere in it."""
    rng = np.random.default_rng(seed)
    return np.kron(rng.integers(0, 256, (h // 8, w // 8, 3)), np.ones((8, 8, 1))).astype(np.uint8)


def pillow_rgb(data):
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def scan_start(data):
    """Where the (first) scan's entropy-coded data begins."""
    sos = data.find(b"\xff\xda")
    return sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")


def corruptions(data, count, seed):
    """`count` copies of `data`, each with one corruption inside the entropy-coded data: a stray
    marker, a random byte, or four random bytes."""
    rng = np.random.default_rng(seed)
    start = scan_start(data)
    for k in range(count):
        d = bytearray(data)
        pos = int(rng.integers(start, len(d) - 2))
        if k % 3 == 0:
            d[pos:pos + 2] = bytes([0xFF, int(rng.integers(0xC0, 0xFF))])
        elif k % 3 == 1:
            d[pos] = int(rng.integers(0, 256))
        else:
            d[pos:pos + 4] = bytes(rng.integers(0, 256, 4).tolist())
        yield bytes(d)


@pytest.mark.parametrize("layout", [dict(quality=90), dict(quality=90, subsampling=0),
                                    dict(quality=85, progressive=True)])
def test_corrupt_data_is_an_error_wherever_pillow_refuses_and_pillows_pixels_elsewhere(layout):
    """Over 120 corruptions of each layout: every file Pillow refuses, prefetch refuses too (it
    once returned a grey image for a stray marker); every image prefetch returns has exactly
    Pillow's pixels. prefetch is stricter than Pillow where libjpeg reports lost data (a marker
    where entropy-coded data should be, a bad Huffman code) and the rest of the file parses:
    Pillow returns those images with a grey or garbled band, prefetch raises."""
    refused_by_both = stricter = 0
    for n, data in enumerate(corruptions(encode(photo(), **layout), 120, seed=n_seed(layout))):
        try:
            expected = pillow_rgb(data)
        except (OSError, SyntaxError, ValueError):
            expected = None
        try:
            got = decode_jpeg([data]).tensors()[0].numpy()
        except RuntimeError as e:
            assert "decode_jpeg: sample 0" in str(e), str(e)
            got = None
        if expected is None:
            assert got is None, "corruption %d: Pillow refuses it, prefetch returned an image" % n
            refused_by_both += 1
        elif got is None:
            stricter += 1
        else:
            np.testing.assert_array_equal(got, expected, err_msg="corruption %d" % n)
    assert refused_by_both > 0  # the comparison saw files Pillow refuses


def n_seed(layout):
    return 11 + len(layout) + int(layout.get("progressive", False)) * 7


def test_a_stray_marker_in_the_scan_names_the_sample_and_what_is_wrong():
    data = bytearray(encode(photo()))
    middle = (scan_start(data) + len(data)) // 2
    data[middle:middle + 2] = b"\xff\xc4"  # a DHT marker inside the entropy-coded data
    ok = encode(photo(seed=1))
    with pytest.raises(RuntimeError, match=r"decode_jpeg: sample 1 .*(Corrupt JPEG data|Unsupported marker)"):
        decode_jpeg([ok, bytes(data)])
    with pytest.raises(RuntimeError, match=r"sample 1 "):
        decode_resized_crop([ok, bytes(data)], [[0, 0, 128, 128]] * 2, 16, [0.5] * 3, [0.2] * 3)


def test_a_window_above_a_corruption_decodes_and_one_over_it_does_not():
    """A window decode reads the rows down to its bottom only: a corruption below it cannot change
    its pixels (which equal the full decode's of an intact file); one inside it raises."""
    intact = encode(photo(256, 64))
    data = bytearray(intact)
    at = len(data) - 40  # near the end of the scan: the last rows
    data[at:at + 2] = b"\xff\xc4"
    top = decode_jpeg([bytes(data)], [[0, 0, 64, 64]]).tensors()[0].numpy()
    np.testing.assert_array_equal(top, pillow_rgb(intact)[:64])
    with pytest.raises(RuntimeError, match="sample 0"):
        decode_jpeg([bytes(data)], [[192, 0, 64, 64]])


def test_a_cmyk_jpeg_has_pillows_colours_with_or_without_the_adobe_marker():
    rng = np.random.default_rng(3)
    cmyk = Image.fromarray(rng.integers(0, 256, (24, 32, 4)).astype(np.uint8), mode="CMYK")
    buf = io.BytesIO()
    cmyk.save(buf, format="JPEG", quality=95)
    with_marker = buf.getvalue()
    at = with_marker.find(b"\xff\xee")  # Adobe's APP14 segment
    assert at > 0
    length = int.from_bytes(with_marker[at + 2:at + 4], "big")
    without = with_marker[:at] + with_marker[at + 2 + length:]
    assert without.find(b"\xff\xee") < 0
    for data in (with_marker, without):
        np.testing.assert_array_equal(decode_jpeg([data]).tensors()[0].numpy(), pillow_rgb(data))


# --- decompression bombs ---------------------------------------------------------------------------

def claiming(data, height, width):
    """`data` with a frame header that claims height x width (the scan stays as it is)."""
    d = bytearray(data)
    sof = d.find(b"\xff\xc0")
    d[sof + 5:sof + 7] = height.to_bytes(2, "big")
    d[sof + 7:sof + 9] = width.to_bytes(2, "big")
    return bytes(d)


@pytest.fixture
def limit():
    previous = max_image_pixels()
    yield
    set_max_image_pixels(previous)


def test_pillows_default_limit():
    assert max_image_pixels() == 89478485  # PIL.Image.MAX_IMAGE_PIXELS


@pytest.mark.skipif(SANITIZED, reason="ASan's shadow memory cannot be mapped under a 4 GB address-space cap")
def test_a_bomb_is_refused_before_any_memory_is_reserved_for_it():
    """A 3 KB file claiming 65500 x 65500 (12.9 GB of pixels): refused naming the sample, in a
    child whose address space is capped at 4 GB, so that an allocation for it would have failed
    differently (it used to allocate and return a grey image)."""
    from ..helpers import run_child

    child = run_child("""
import io, resource
import numpy as np, torch
from PIL import Image
import prefetch
from prefetch.ops import decode_jpeg, decode_resized_crop
buf = io.BytesIO()
Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(buf, format="JPEG")
d = bytearray(buf.getvalue())
sof = d.find(b"\\xff\\xc0")
d[sof + 5:sof + 9] = (65500).to_bytes(2, "big") * 2
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
for call in (lambda: decode_jpeg([bytes(d)]),
             lambda: decode_jpeg([bytes(d)], [[0, 0, 60000, 60000]]),
             lambda: decode_resized_crop([bytes(d)], [[0, 0, 60000, 60000]], 8, [0.5] * 3, [0.2] * 3),
             lambda: torch.ops.prefetch.decode_jpeg(torch.frombuffer(bytearray(d), dtype=torch.uint8),
                                                    torch.tensor([0]), torch.tensor([len(d)]), None)):
    try:
        call()
        print("DECODED")
    except RuntimeError as e:
        print("REFUSED", str(e).splitlines()[0])
""", timeout=120)
    assert child.returncode == 0, child.stderr
    lines = [l for l in child.stdout.splitlines() if l.startswith(("REFUSED", "DECODED"))]
    assert len(lines) == 4, child.stdout
    for line in lines:
        assert line.startswith("REFUSED") and "sample 0's header claims 65500 x 65500" in line, line
        assert "twice the limit of 89478485" in line and "set_max_image_pixels" in line, line


def test_over_the_limit_warns_and_twice_it_raises_and_none_turns_it_off(limit):
    data = encode(photo(64, 64))  # 4096 pixels
    assert set_max_image_pixels(3000) == 89478485
    for call in (lambda: decode_jpeg([data]), lambda: decode_jpeg([data], [[0, 0, 8, 8]]),
                 lambda: decode_resized_crop([data], [[0, 0, 8, 8]], 4, [0.5] * 3, [0.2] * 3)):
        with pytest.warns(DecompressionBombWarning, match=r"sample 0's header claims 64 x 64 = 4096 pixels, "
                                                          r"more than the limit of 3000"):
            call()
    set_max_image_pixels(2000)
    with pytest.raises(RuntimeError, match=r"more than twice the limit of 2000"):
        decode_jpeg([data])
    assert set_max_image_pixels(None) == 2000 and max_image_pixels() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        decode_jpeg([data])  # no limit: no warning either
    for bad in (0, -5, 2.5, "7"):
        with pytest.raises((ValueError, TypeError), match="limit"):
            set_max_image_pixels(bad)


def test_fused_augment_decode_applies_the_limit(limit):
    data = encode(photo(64, 64))
    aug = prefetch.FusedAugment([0.5] * 3, [0.2] * 3, random_resized_crop=8, decode=True, seed=0)
    batch = (prefetch.Ragged.from_tensors([torch.frombuffer(bytearray(data), dtype=torch.uint8)]),)
    set_max_image_pixels(1000)
    with pytest.raises(RuntimeError, match="decode_resized_crop: sample 0's header claims 64 x 64"):
        aug(batch)


def test_a_gpu_decoder_never_sees_a_bomb(limit):
    """The GPU path checks the headers' sizes first, as the CPU decoder does (a fake GPU backend
    records what it was given)."""
    calls = []

    class Recording(gpu_decoders.CpuBackend):
        name = "recording"

        def refuses(self, layout):
            return None

        def decode_batch(self, images, device):
            calls.append(len(images))
            return super().decode_batch(images, device)

    data = encode(photo(64, 64))
    bomb = claiming(data, 60000, 60000)
    with pytest.raises(RuntimeError, match="decode_jpeg: sample 1's header claims 60000 x 60000"):
        decode.decode_with_backend(decode.encoded_batch([data, bomb]), None, torch.device("cpu"),
                                   Recording())
    assert calls == []
    assert jpeg_sizes([bomb]).tolist() == [[60000, 60000, 3]]  # reading a header is always safe
