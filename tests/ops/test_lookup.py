"""prefetch.ops.lookup (each value replaced by its image's, or channel's, table entry) against plain
torch indexing; the policy ops built on it are tested against float64 references of torchvision's
formulas in tests/transforms/test_policy_ops.py."""
import pytest
import torch

from prefetch.ops import lookup


def reference(images, tables):
    n, c, h, w = images.shape
    t = tables.expand(n, c, 256) if tables.shape[1] == 1 else tables
    return t.long().gather(-1, images.reshape(n, c, h * w).long()).view(n, c, h, w).to(torch.uint8)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("c", [1, 3, 5])
def test_tables_per_image_and_per_channel(device, per_channel, c):
    g = torch.Generator().manual_seed(c)
    x = torch.randint(0, 256, (6, c, 13, 17), dtype=torch.uint8, generator=g)
    tables = torch.randint(0, 256, (6, c if per_channel else 1, 256), dtype=torch.uint8, generator=g)
    got = lookup(x.to(device), tables.to(device))
    assert got.dtype == torch.uint8 and got.shape == x.shape and got.is_contiguous()
    assert torch.equal(got.cpu(), reference(x, tables))


def test_any_input_strides(device):
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, 256, (4, 20, 18, 3), dtype=torch.uint8, generator=g).permute(0, 3, 1, 2)[:, :, 2:, ::3]
    tables = torch.randint(0, 256, (4, 3, 256), dtype=torch.uint8, generator=g)
    assert torch.equal(lookup(x.to(device), tables.to(device)).cpu(), reference(x.contiguous(), tables))


def test_empty_batches(device):
    for shape in [(0, 3, 5, 5), (2, 3, 0, 4), (2, 1, 4, 0)]:
        x = torch.zeros(shape, dtype=torch.uint8, device=device)
        assert lookup(x, torch.zeros(shape[0], 1, 256, dtype=torch.uint8, device=device)).shape == shape


@pytest.mark.parametrize("tables, message", [
    (torch.zeros(2, 2, 256, dtype=torch.uint8), r"\[N, 1 or C, 256\] = \[2, 1 or 3, 256\]"),
    (torch.zeros(2, 1, 255, dtype=torch.uint8), r"\[N, 1 or C, 256\]"),
    (torch.zeros(3, 1, 256, dtype=torch.uint8), r"= \[2, 1 or 3, 256\]"),
    (torch.zeros(2, 1, 256), r"uint8 \[N, 1 or C, 256\]"),
    (torch.zeros(2, 1, 256, dtype=torch.uint8, device="meta"), "tables is on meta"),
])
def test_bad_tables_are_named(tables, message):
    with pytest.raises(RuntimeError, match=message):
        lookup(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), tables)


def test_bad_images_are_named():
    with pytest.raises(RuntimeError, match=r"uint8 \[N, C, H, W\]"):
        lookup(torch.zeros(2, 3, 4, 4), torch.zeros(2, 1, 256, dtype=torch.uint8))


def test_opcheck(device):
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, 256, (3, 3, 7, 6), dtype=torch.uint8, generator=g).to(device)
    for t in (1, 3):
        tables = torch.randint(0, 256, (3, t, 256), dtype=torch.uint8, generator=g).to(device)
        torch.library.opcheck(torch.ops.prefetch.lookup.default, (x, tables))


def test_torch_compile_fullgraph_compiles_once_across_batches(device):
    import torch._dynamo.testing

    counter = torch._dynamo.testing.CompileCounter()

    def step(x, t):
        return lookup(x, t).float().mean()

    compiled = torch.compile(step, fullgraph=True, backend=counter)
    g = torch.Generator().manual_seed(6)
    for _ in range(4):
        x = torch.randint(0, 256, (4, 3, 12, 12), dtype=torch.uint8, generator=g).to(device)
        t = torch.randint(0, 256, (4, 1, 256), dtype=torch.uint8, generator=g).to(device)
        assert torch.equal(compiled(x, t), step(x, t))
    assert counter.frame_count == 1
