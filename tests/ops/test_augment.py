"""The fused ops against a float64 pure-torch reference written here, on fresh random inputs
(the arguments they take and refuse: test_augment_arguments.py)."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefetch.ops import flip_crop, normalize_flip

from ..reference import assert_close_across_devices, reference, reference_geometry

MEAN = [0.485, 0.456, 0.406, 0.5]
STD = [0.229, 0.224, 0.225, 0.25]
EPS = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}


def assert_matches(out, ref, dtype):
    out = out.cpu().double()
    assert out.shape == ref.shape
    if dtype == torch.float32:
        err = (out - ref).abs()
        bound = 1e-6 * ref.abs().clamp(min=1.0)  # 1e-6 relative, measured from magnitude 1 up
        assert bool((err <= bound).all()), "max error %g" % float((err - bound).max())
    else:
        # Within the rounding of the reference to `dtype`: under one unit in the last place.
        err = (out - ref).abs()
        bound = ref.abs() * EPS[dtype] + 2.0 ** -24
        assert bool((err <= bound).all()), "max error %g" % float((err - bound).max())


def random_case(device, N, C, H, W, layout, seed):
    g = torch.Generator().manual_seed(seed)
    shape = (N, H, W, C) if layout == "NHWC" else (N, C, H, W)
    images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)
    flips = torch.rand(N, generator=g) < 0.5, torch.rand(N, generator=g) < 0.5
    return images.to(device), flips[0].to(device), flips[1].to(device), g


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_dtypes_layouts_random_flips_and_crops(device, dtype, layout, channels_last):
    images, hflip, vflip, g = random_case(device, 5, 3, 13, 11, layout, seed=1)
    crop = (9, 7)
    # Windows inside, partly outside on every side, and entirely outside.
    offsets = torch.tensor([[2, 1], [-3, 5], [8, -4], [-20, 30], [4, 4]], dtype=torch.int32).to(device)
    for kwargs in (
        {},
        {"hflip": hflip, "vflip": vflip},
        {"crop": crop},  # centred
        {"crop": crop, "offsets": offsets, "hflip": hflip, "vflip": vflip, "fill": 77},
    ):
        out = normalize_flip(images, MEAN[:3], STD[:3], dtype=dtype, layout=layout,
                             channels_last=channels_last, **kwargs)
        assert out.device == images.device and out.dtype == dtype
        expected_format = torch.channels_last if channels_last else torch.contiguous_format
        assert out.is_contiguous(memory_format=expected_format)
        assert_matches(out, reference(images, MEAN, STD, layout=layout, **kwargs), dtype)


@pytest.mark.parametrize("flips", ["none", "all", "random"])
@pytest.mark.parametrize("C", [1, 3, 4])
def test_channels_and_flip_patterns(device, flips, C):
    images, hflip, vflip, _ = random_case(device, 4, C, 8, 10, "NHWC", seed=2 + C)
    if flips == "all":
        hflip = vflip = torch.ones(4, dtype=torch.bool, device=device)
    elif flips == "none":
        hflip = vflip = torch.zeros(4, dtype=torch.bool, device=device)
    out = normalize_flip(images, MEAN[:C], STD[:C], hflip=hflip, vflip=vflip)
    assert_matches(out, reference(images, MEAN, STD, hflip, vflip), torch.float32)


@pytest.mark.parametrize("N,H,W,crop", [(0, 5, 5, None), (1, 1, 1, None), (1, 1, 7, (3, 3)),
                                        (2, 7, 1, (2, 5)), (3, 9, 13, (5, 11)), (2, 4, 4, (10, 12))])
def test_edge_sizes(device, N, H, W, crop):
    images, hflip, vflip, _ = random_case(device, N, 3, H, W, "NHWC", seed=H * W + N)
    out = normalize_flip(images, MEAN[:3], STD[:3], hflip=hflip, vflip=vflip, crop=crop, fill=9)
    assert_matches(out, reference(images, MEAN, STD, hflip, vflip, crop, fill=9), torch.float32)


@pytest.mark.parametrize("flipped", [False, True])
def test_windows_wholly_beside_the_image_are_fill(device, flipped):
    # Once wrote fill past the end of a row on the CPU (the inside-columns bound exceeded w when
    # a flipped window started right of the image); found by ASan, fixed in geometry.h.
    images, _, _, _ = random_case(device, 4, 3, 5, 6, "NHWC", seed=40)
    offsets = torch.tensor([[0, 20], [0, -20], [20, 0], [-20, 1]], device=device)
    hflip = torch.full((4,), flipped, device=device)
    kwargs = {"crop": (3, 4), "offsets": offsets, "hflip": hflip, "fill": 7}
    out = normalize_flip(images, MEAN[:3], STD[:3], **kwargs)
    assert_matches(out, reference(images, MEAN, STD, **kwargs), torch.float32)
    masks = flip_crop(images[..., 0].contiguous(), **kwargs)
    assert bool((masks == 7).all())


def test_non_contiguous_inputs(device):
    g = torch.Generator().manual_seed(3)
    base = torch.randint(0, 256, (6, 20, 30, 5), dtype=torch.uint8, generator=g).to(device)
    views = [base[::2, 1:15, ::3, :3], base[:, :, :, 1:4].transpose(1, 2), base[..., :3].flip(0)]
    for images in views:
        N = images.shape[0]
        hflip = torch.arange(N, device=device) % 2 == 0
        out = normalize_flip(images, MEAN[:3], STD[:3], hflip=hflip, crop=(5, 4))
        assert_matches(out, reference(images, MEAN, STD, hflip, crop=(5, 4)), torch.float32)


@st.composite
def op_cases(draw):
    """Random geometry: sizes from 0 samples and 1 pixel up, windows anywhere (inside, across
    an edge, wholly beside the image), any flips, gathers, fills, layouts, output dtypes."""
    N, C = draw(st.integers(0, 4)), draw(st.integers(1, 5))
    H, W = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    crop = draw(st.none() | st.tuples(st.integers(1, 16), st.integers(1, 16)))
    sources = N + draw(st.integers(0, 2))
    indices = draw(st.none() | st.lists(st.integers(0, max(sources - 1, 0)), min_size=N, max_size=N))
    if sources == 0:
        indices = None
    if indices is None:
        sources = N
    flags = st.lists(st.booleans(), min_size=N, max_size=N)
    return {
        "sources": sources, "C": C, "H": H, "W": W, "crop": crop, "indices": indices,
        "offsets": draw(st.none() | st.lists(st.tuples(st.integers(-20, 20), st.integers(-20, 20)),
                                             min_size=N, max_size=N)) if crop else None,
        "hflip": draw(st.none() | flags), "vflip": draw(st.none() | flags),
        "fill": draw(st.integers(0, 255)), "layout": draw(st.sampled_from(["NHWC", "NCHW"])),
        "dtype": draw(st.sampled_from([torch.float32, torch.float16, torch.bfloat16])),
        "channels_last": draw(st.booleans()), "seed": draw(st.integers(0, 2**31 - 1)),
    }


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=op_cases())
def test_property_ops_equal_the_reference(device, case):
    g = torch.Generator().manual_seed(case["seed"])
    S, C, H, W = case["sources"], case["C"], case["H"], case["W"]
    shape = (S, H, W, C) if case["layout"] == "NHWC" else (S, C, H, W)
    images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=g).to(device)

    def tensor(values, dtype, shape=(-1,)):
        return None if values is None else torch.tensor(values, dtype=dtype).reshape(shape).to(device)

    idx = tensor(case["indices"], torch.int64)
    offsets = tensor(case["offsets"], torch.int64, (-1, 2))
    hflip, vflip = tensor(case["hflip"], torch.bool), tensor(case["vflip"], torch.bool)
    geometry = {"hflip": hflip, "vflip": vflip, "crop": case["crop"], "offsets": offsets,
                "fill": case["fill"]}
    picked = images if idx is None else images[idx]
    mean, std = (MEAN[:3] + [0.3, 0.7])[:C], (STD[:3] + [0.2, 0.4])[:C]
    out = normalize_flip(images, mean, std, dtype=case["dtype"], layout=case["layout"],
                         channels_last=case["channels_last"], indices=idx, **geometry)
    assert_matches(out, reference(picked, mean, std, layout=case["layout"], **geometry), case["dtype"])

    masks = images[..., 0] if case["layout"] == "NHWC" else images[:, 0]
    got = flip_crop(masks, indices=idx, **geometry)
    expected = reference_geometry((masks if idx is None else masks[idx]).cpu()[:, None],
                                  None if hflip is None else hflip.cpu(),
                                  None if vflip is None else vflip.cpu(), case["crop"],
                                  None if offsets is None else offsets.cpu(), case["fill"])[:, 0]
    assert torch.equal(got.cpu().double(), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_training_sizes_padding_crop_and_flips(device, dtype, channels_last):
    # Rows of 56 and 168 elements: long and aligned enough for the CUDA kernel's 16-byte stores,
    # which the odd small sizes above rarely reach.
    images, hflip, vflip, g = random_case(device, 6, 3, 64, 64, "NHWC", seed=21)
    offsets = (torch.randint(0, 17, (6, 2), generator=g) - 4).to(device)  # RandomCrop(56, padding=4)
    kwargs = {"hflip": hflip, "crop": (56, 56), "offsets": offsets}
    out = normalize_flip(images, MEAN[:3], STD[:3], dtype=dtype, channels_last=channels_last, **kwargs)
    assert_matches(out, reference(images, MEAN, STD, **kwargs), dtype)


# uint8 output: channel 0 halves the bytes (a tie at every odd byte), channel 1 scales them by 1.5
# and shifts them below 0 and past 255, channel 2 keeps them; each value exact in float32.
U8_MEAN, U8_STD = [0.0, 0.1, 0.0], [2 / 255, 1 / 382.5, 1 / 255]


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_uint8_output_is_the_value_rounded_half_to_even_and_saturated(device, layout, channels_last):
    images, hflip, vflip, g = random_case(device, 6, 3, 64, 64, layout, seed=23)
    offsets = (torch.randint(0, 17, (6, 2), generator=g) - 4).to(device)
    kwargs = {"hflip": hflip, "vflip": vflip, "crop": (56, 56), "offsets": offsets, "fill": 77}
    out = normalize_flip(images, U8_MEAN, U8_STD, dtype=torch.uint8, layout=layout,
                         channels_last=channels_last, **kwargs)
    assert out.dtype == torch.uint8 and out.shape == (6, 3, 56, 56)
    x = images.cpu() if layout == "NCHW" else images.cpu().permute(0, 3, 1, 2)
    win = reference_geometry(x, hflip.cpu(), vflip.cpu(), kwargs["crop"], offsets.cpu(), 77)
    exact = torch.stack([win[:, 0] * 0.5, win[:, 1] * 1.5 - 38.25, win[:, 2]], dim=1)
    assert bool((exact[:, 0] % 1 == 0.5).any()) and bool((exact[:, 1] < 0).any())
    assert bool((exact[:, 1] > 255).any())
    assert torch.equal(out.cpu(), torch.round(exact).clamp(0, 255).to(torch.uint8))  # half to even


@pytest.mark.parametrize("C", [64, 65, 130])
def test_many_channels(device, C):
    # Up to 64 channels' constants reach the CUDA kernel by value, more through device memory.
    images, hflip, vflip, g = random_case(device, 3, C, 6, 7, "NHWC", seed=C)
    mean = (torch.rand(C, generator=g) * 0.5 + 0.25).tolist()
    std = (torch.rand(C, generator=g) * 0.3 + 0.1).tolist()
    for channels_last in (False, True):
        out = normalize_flip(images, mean, std, hflip=hflip, vflip=vflip, crop=(5, 5),
                             channels_last=channels_last)
        assert_matches(out, reference(images, mean, std, hflip, vflip, crop=(5, 5)), torch.float32)


@pytest.mark.cuda
def test_cuda_graph_replay_reads_the_new_inputs_with_the_captured_constants():
    from ..conftest import require_cuda
    require_cuda()
    images, hflip, _, g = random_case("cuda", 8, 3, 32, 32, "NHWC", seed=30)
    offsets = (torch.randint(0, 9, (8, 2), generator=g) - 4).to("cuda")
    static = images.clone()

    def op():
        return normalize_flip(static, MEAN[:3], STD[:3], hflip=hflip, crop=(28, 28), offsets=offsets,
                              dtype=torch.float16)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        op()  # warm-up outside the capture, as torch.cuda.graphs asks
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = op()
    # Constants that had travelled through a pinned block would now read whatever reused it.
    churn = [torch.full((64,), 1e4).pin_memory() for _ in range(16)]
    new = torch.randint(0, 256, static.shape, dtype=torch.uint8, generator=g)
    static.copy_(new)
    graph.replay()
    torch.cuda.synchronize()
    del churn
    assert_matches(out, reference(new, MEAN, STD, hflip, crop=(28, 28), offsets=offsets), torch.float16)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reduced_precision_is_the_float32_result_rounded(device, dtype):
    # Our float->half/bfloat16 conversion must round exactly as torch does (nearest even).
    images, hflip, vflip, _ = random_case(device, 8, 3, 32, 32, "NHWC", seed=4)
    # Channel 0 puts pixel 128 at -3e-6 (an fp16 subnormal), channel 1 overflows fp16 (up to 1e6).
    mean, std = [128 / 255 + 3e-6, 0.0, 0.999], [1.0, 1e-6, 0.01]
    f32 = normalize_flip(images, mean, std, hflip=hflip, dtype=torch.float32)
    low = normalize_flip(images, mean, std, hflip=hflip, dtype=dtype)
    if low.device.type == "cuda":  # each kernel's FMAs are ptxas's choice (tests/reference.py)
        assert_close_across_devices(low, f32.to(dtype))
    else:
        assert torch.equal(low.view(torch.int16), f32.to(dtype).view(torch.int16))


@pytest.mark.parametrize("mask_dtype", [torch.uint8, torch.int16, torch.int32, torch.int64])
def test_masks_get_the_images_geometry(device, mask_dtype):
    images, hflip, vflip, g = random_case(device, 5, 3, 12, 10, "NHWC", seed=5)
    masks = torch.randint(-1000 if mask_dtype != torch.uint8 else 0, 255, (5, 12, 10),
                          dtype=mask_dtype, generator=g).to(device)
    offsets = torch.tensor([[0, 0], [-2, 3], [5, -1], [1, 1], [3, 2]], device=device)
    geo = dict(hflip=hflip, vflip=vflip, crop=(8, 9), offsets=offsets)
    out = flip_crop(masks, fill=255, **geo)
    assert out.dtype == mask_dtype and out.device == masks.device
    expected = reference_geometry(masks.cpu().unsqueeze(1), hflip.cpu(), vflip.cpu(), (8, 9),
                                  offsets.cpu(), 255).squeeze(1)
    assert torch.equal(out.cpu().double(), expected)
    # A mask carrying each pixel's own coordinates: after the op it must say, pixel by pixel,
    # which input pixel the image op used.
    H, W = 12, 10
    coords = (torch.arange(H).view(H, 1) * W + torch.arange(W)).to(torch.int32).expand(5, H, W)
    where = flip_crop(coords.to(device), fill=-1, **geo).cpu()
    img = normalize_flip(images, MEAN[:3], STD[:3], **geo).cpu()
    src = images.cpu().permute(0, 3, 1, 2).reshape(5, 3, H * W).double()
    for n in range(5):
        inside = where[n] >= 0
        picked = src[n][:, where[n][inside].long()]
        expected_vals = (picked / 255 - torch.tensor(MEAN[:3]).double().view(3, 1)) / \
            torch.tensor(STD[:3]).double().view(3, 1)
        assert torch.allclose(img[n][:, inside].double(), expected_vals, atol=1e-5)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_indices_gather_in_the_same_pass(device, layout):
    # A "dataset" of 9 samples; a batch of 6 picks some twice, in any order.
    images, _, _, g = random_case(device, 9, 3, 11, 10, layout, seed=11)
    indices = torch.tensor([8, 0, 3, 3, 7, 1], device=device)
    hflip = torch.tensor([1, 0, 1, 0, 0, 1], dtype=torch.bool, device=device)
    vflip = torch.tensor([0, 1, 1, 0, 1, 0], dtype=torch.bool, device=device)
    offsets = torch.tensor([[0, 0], [-2, 3], [4, -1], [1, 1], [-5, 8], [2, 2]], device=device)
    geo = dict(hflip=hflip, vflip=vflip, crop=(8, 7), offsets=offsets, fill=9)
    out = normalize_flip(images, MEAN[:3], STD[:3], layout=layout, indices=indices, **geo)
    picked = images.cpu()[indices.cpu()]  # the gather done first, by torch
    assert_matches(out, reference(picked, MEAN, STD, layout=layout, **geo), torch.float32)
    masks = torch.randint(0, 100, (9, 11, 10), dtype=torch.int32, generator=g).to(device)
    got = flip_crop(masks, indices=indices, **geo)
    expected = reference_geometry(masks.cpu()[indices.cpu()].unsqueeze(1), hflip.cpu(), vflip.cpu(),
                                  (8, 7), offsets.cpu(), 9).squeeze(1)
    assert torch.equal(got.cpu().double(), expected)


class _OpcheckInputs:
    """The tensors the opcheck cases are built from, on `device` (seeded: the same every run)."""

    def __init__(self, device):
        g = torch.Generator().manual_seed(7)
        self.device = device
        self.x = torch.randint(0, 256, (3, 9, 8, 3), dtype=torch.uint8, generator=g).to(device)
        self.flips = (torch.arange(3, device=device) % 2 == 0)
        self.offs = torch.tensor([[0, 0], [-1, 2], [3, -2]], device=device)
        self.masks = torch.randint(0, 5, (3, 9, 8), dtype=torch.int64, generator=g).to(device)


# One case per op and argument combination, by a readable id: (op, args, kwargs) built from the
# inputs, so that each case is its own test and a failure names the combination.
_OPCHECK_CASES = {
    "normalize_flip-defaults": lambda i: (
        "normalize_flip", (i.x, MEAN[:3], STD[:3]), {}),
    "normalize_flip-flips-crop-offsets-fill-bf16-channels_last": lambda i: (
        "normalize_flip", (i.x, MEAN[:3], STD[:3]),
        dict(hflip=i.flips, vflip=i.flips, crop=[6, 5], offsets=i.offs, fill=3, dtype=torch.bfloat16,
             layout="NHWC", channels_last=True)),
    "normalize_flip-NCHW-fp16": lambda i: (
        "normalize_flip", (i.x.permute(0, 3, 1, 2).contiguous(), MEAN[:3], STD[:3]),
        dict(dtype=torch.float16, layout="NCHW")),
    "flip_crop-hflip-crop-offsets": lambda i: (
        "flip_crop", (i.masks,), dict(hflip=i.flips, crop=[4, 4], offsets=i.offs)),
    "normalize_flip-gathered-indices": lambda i: (
        "normalize_flip", (i.x, MEAN[:3], STD[:3]),
        dict(hflip=i.flips[:2], crop=[5, 5], offsets=i.offs[:2],
             indices=torch.tensor([2, 0], device=i.device))),
    "flip_crop-gathered-repeated-indices": lambda i: (
        "flip_crop", (i.masks,), dict(indices=torch.tensor([1, 1, 2, 0], device=i.device))),
}


@pytest.mark.parametrize("case", list(_OPCHECK_CASES))
def test_opcheck(device, case):
    op, args, kwargs = _OPCHECK_CASES[case](_OpcheckInputs(device))
    torch.library.opcheck(getattr(torch.ops.prefetch, op).default, args, kwargs)


def test_torch_compile_fullgraph(device):
    images, hflip, vflip, _ = random_case(device, 4, 3, 16, 16, "NHWC", seed=8)

    def step(x, h):
        return normalize_flip(x, MEAN[:3], STD[:3], hflip=h, crop=(12, 12), dtype=torch.float16).sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    assert torch.allclose(compiled(images, hflip).float(), step(images, hflip).float())
