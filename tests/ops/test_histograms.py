"""prefetch.ops.histograms (each channel's 256-bin histogram) against torch.bincount of each plane;
Equalize, built on it, is tested against float64 references of torchvision's formulas in
tests/transforms/test_policy_ops.py."""
import pytest
import torch

from prefetch.ops import histograms


def reference(images):
    n, c = images.shape[:2]
    planes = images.reshape(n * c, -1).long()
    return torch.stack([torch.bincount(p, minlength=256) for p in planes]).view(n, c, 256).int()


@pytest.mark.parametrize("c", [1, 3, 4])
def test_counts_every_channel_of_every_image(device, c):
    g = torch.Generator().manual_seed(c)
    x = torch.randint(0, 256, (5, c, 13, 70), dtype=torch.uint8, generator=g)
    x[0] = 255  # a flat image: every value in one bin
    x[1, 0, ::2] = 0
    got = histograms(x.to(device))
    assert got.dtype == torch.int32 and got.shape == (5, c, 256) and got.is_contiguous()
    assert torch.equal(got.cpu(), reference(x))
    assert int(got[0, 0, 255]) == 13 * 70


def test_any_input_strides(device):
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, 256, (4, 20, 18, 3), dtype=torch.uint8, generator=g).permute(0, 3, 1, 2)[:, :, 2:, ::3]
    assert torch.equal(histograms(x.to(device)).cpu(), reference(x.contiguous()))


def test_many_planes_and_large_planes(device):
    g = torch.Generator().manual_seed(3)
    for shape in [(300, 3, 2, 5), (1, 1, 700, 600)]:
        x = torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)
        assert torch.equal(histograms(x.to(device)).cpu(), reference(x))


def test_empty_batches(device):
    for shape in [(0, 3, 5, 5), (2, 3, 0, 4), (2, 1, 4, 0)]:
        got = histograms(torch.zeros(shape, dtype=torch.uint8, device=device))
        assert got.shape == (shape[0], shape[1], 256) and int(got.abs().sum()) == 0


@pytest.mark.parametrize("images, message", [
    (torch.zeros(2, 3, 4, 4), r"histograms: images must be uint8 \[N, C, H, W\], got Float"),
    (torch.zeros(3, 4, 4, dtype=torch.uint8), r"uint8 \[N, C, H, W\], got Byte of shape \[3, 4, 4\]"),
])
def test_bad_images_are_named(images, message):
    with pytest.raises(RuntimeError, match=message):
        histograms(images)


def test_opcheck(device):
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, 256, (3, 3, 7, 6), dtype=torch.uint8, generator=g).to(device)
    torch.library.opcheck(torch.ops.prefetch.histograms.default, (x,))


def test_torch_compile_fullgraph_compiles_once_across_batches(device):
    import torch._dynamo.testing

    counter = torch._dynamo.testing.CompileCounter()

    def step(x):
        return histograms(x).cumsum(-1)

    compiled = torch.compile(step, fullgraph=True, backend=counter)
    g = torch.Generator().manual_seed(6)
    for _ in range(4):
        x = torch.randint(0, 256, (4, 3, 12, 12), dtype=torch.uint8, generator=g).to(device)
        assert torch.equal(compiled(x), step(x))
    assert counter.frame_count == 1
