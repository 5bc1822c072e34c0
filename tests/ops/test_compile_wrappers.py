"""Every public op of :mod:`prefetch.ops`, called through its Python wrapper (not only
``torch.ops.prefetch.*``), compiles with ``torch.compile(fullgraph=True)`` and gives the eager
result (issue 43: ``color_jitter``'s wrapper branched on tensor values on the host; a list of
images given to ``resized_crop`` was checked value by value). The names come from
``prefetch.ops.__all__``: a new name must be added to ``CASES`` (its call) or to ``NOT_OPS``
(why it is no op to compile), or :func:`test_every_public_name_is_classified` fails.

Tensors are tiny: compiling costs seconds of CPU on this machine. The backend is ``aot_eager``
(Dynamo's graph, the fake kernels, then the real kernels), what a graph break or a fake kernel's
fault shows; Inductor adds code generation only."""
import io

import numpy as np
import pytest
import torch

import prefetch.ops
from prefetch import Ragged
from prefetch.ops import COLOR_STEPS

MEAN, STD = [0.5, 0.4, 0.3], [0.25, 0.2, 0.3]


def _images(n=2, c=3, h=5, w=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, generator=g)


def _jpegs():
    from PIL import Image

    out = []
    for k, (h, w) in enumerate([(9, 7), (6, 5)]):
        pixels = np.random.default_rng(k).integers(0, 256, (h, w, 3), dtype=np.uint8)
        f = io.BytesIO()
        Image.fromarray(pixels).save(f, "JPEG")
        out.append(torch.frombuffer(bytearray(f.getvalue()), dtype=torch.uint8))
    return Ragged.from_tensors(out)


def _color_jitter_case():
    steps = torch.tensor([[COLOR_STEPS.index("brightness"), COLOR_STEPS.index("contrast")],
                          [COLOR_STEPS.index("saturation"), COLOR_STEPS.index("hue")]])
    factors = torch.tensor([[0.5, 1.25], [0.75, -0.125]], dtype=torch.float64)
    return prefetch.ops.color_jitter, (_images(), steps, factors)


# name -> () -> (function of tensors, its arguments): a call as the README shows it.
CASES = {
    "normalize_flip": lambda: (
        lambda x, h: prefetch.ops.normalize_flip(x, MEAN, STD, hflip=h, crop=4, layout="NCHW"),
        (_images(), torch.tensor([True, False]))),
    "flip_crop": lambda: (lambda m, h: prefetch.ops.flip_crop(m, hflip=h, crop=3),
                          (_images()[:, 0], torch.tensor([False, True]))),
    # a list of HWC images (packed inside the graph) and a Ragged
    "resized_crop": lambda: (
        lambda a, b, boxes: prefetch.ops.resized_crop([a, b], boxes, 4, MEAN, STD),
        (_images(1, 3, 5, 6)[0].permute(1, 2, 0).contiguous(),
         _images(1, 3, 7, 4, seed=1)[0].permute(1, 2, 0).contiguous(),
         torch.tensor([[0, 0, 3, 4], [1, 1, 4, 3]]))),
    "affine_warp": lambda: (
        lambda x, m: prefetch.ops.affine_warp(x, m, interpolation="bilinear", fill=[1, 2, 3]),
        (_images(), torch.tensor([[1.0, 0.1, 0.3, 0.0, 1.0, -0.2]] * 2))),
    "pil_affine": lambda: (
        lambda x, m: prefetch.ops.pil_affine(x, m, interpolation="bicubic", fill=[1, 2, 3]),
        (_images(), torch.tensor([[1.0, 0.1, 0.3, 0.0, 1.0, -0.2]] * 2, dtype=torch.float64))),
    "sharpness": lambda: (prefetch.ops.sharpness,
                          (_images(), torch.tensor([0.5, 1.5], dtype=torch.float64))),
    "lookup": lambda: (prefetch.ops.lookup,
                       (_images(), torch.arange(256, dtype=torch.uint8).flip(0).expand(2, 1, 256)
                        .contiguous())),
    "color_jitter": _color_jitter_case,
    "histograms": lambda: (prefetch.ops.histograms, (_images(),)),
    "gaussian_blur": lambda: (lambda x, s: prefetch.ops.gaussian_blur(x, 3, s),
                              (_images(), torch.tensor([0.5, 1.5], dtype=torch.float64))),
    "jpeg_sizes": lambda: (prefetch.ops.jpeg_sizes, (_jpegs(),)),
    "decode_resized_crop": lambda: (
        lambda r, boxes: prefetch.ops.decode_resized_crop(r, boxes, 4, MEAN, STD),
        (_jpegs(), torch.tensor([[0, 0, 4, 4], [1, 1, 3, 3]]))),
}

# Public names that are no op to compile, and why.
NOT_OPS = {
    "COLOR_STEPS": "a constant (color_jitter's step names)",
    "decode_jpeg": "returns a Ragged whose sizes are the files' (read from their headers): no "
                   "fixed output shape for a graph; decode_resized_crop is the compiled form",
    "gpu_jpeg_decoder": "returns a decoder's name (configuration)",
    "max_image_pixels": "configuration", "set_max_image_pixels": "configuration",
    "DecompressionBombWarning": "a warning class",
    "output_pool_stats": "configuration", "release_output_pool": "configuration",
    "set_output_pool_limit": "configuration",
    "cpu_kernel_build": "configuration", "set_cpu_kernel_build": "configuration",
}

# Wrappers whose compilation is a known gap outside this file's owner's code (see the marks).
KNOWN_GAPS = {}  # name -> why its wrapper cannot compile yet (a strict xfail)


def test_every_public_name_is_classified():
    names = set(prefetch.ops.__all__)
    assert not set(CASES) & set(NOT_OPS)
    assert names == set(CASES) | set(NOT_OPS), (
        "classify these public names of prefetch.ops (CASES: a call to compile; NOT_OPS: why "
        "not): %s" % sorted(names ^ (set(CASES) | set(NOT_OPS))))


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[n])) if n in KNOWN_GAPS
    else n for n in sorted(CASES)])
def test_the_wrapper_compiles_with_fullgraph_and_equals_eager(name):
    if name in ("jpeg_sizes", "decode_resized_crop") and not prefetch.built_with_jpeg():
        pytest.skip("the extension was built without libjpeg-turbo")
    fn, args = CASES[name]()
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    out = compiled(*args)
    expected = fn(*args)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    assert torch.equal(out, expected)


def test_compiled_color_jitter_still_refuses_bad_host_steps():
    """The checks the wrapper made on the host are the CPU op's now (C++): a compiled call with
    a step code or a factor out of range raises the eager call's ValueError."""
    fn, (x, steps, factors) = _color_jitter_case()
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    bad_code = steps.clone()
    bad_code[1, 0] = 7
    with pytest.raises(ValueError, match=r"step codes are 0 to 5 .*image 1, step 0 is 7"):
        compiled(x, bad_code, factors)
    bad_factor = factors.clone()
    bad_factor[0, 1] = -2.0
    with pytest.raises(ValueError, match=r"contrast factor of image 0 \(step 1\) is -2"):
        compiled(x, steps, bad_factor)
    bad_hue = factors.clone()
    bad_hue[1, 1] = float("nan")
    with pytest.raises(ValueError, match=r"hue factor of image 1 \(step 1\) is nan"):
        prefetch.ops.color_jitter(x, steps, bad_hue)  # eager: the same check, the same message
