"""PolicyAugment (prefetch/transforms/policy_augment.py): through a loader, each batch is its
position's draws applied (the ops are tested in test_policy_ops.py, the draws in
test_policies.py); layouts, seeds, resume and bad input."""
import os

import pytest
import torch

import prefetch
from prefetch.transforms import PolicyAugment
from prefetch.transforms.policy_ops import apply_table

N, H, W = 8, 20, 16


def batches(count=4, layout="NCHW"):
    g = torch.Generator().manual_seed(0)
    out = []
    for b in range(count):
        x = torch.randint(0, 256, (N, 3, H, W), dtype=torch.uint8, generator=g)
        out.append((x if layout == "NCHW" else x.permute(0, 2, 3, 1).contiguous(),
                    torch.arange(N) + b * N))
    return out


@pytest.mark.parametrize("policy, options", [
    ("trivial_augment_wide", {}), ("rand_augment", dict(num_ops=3, magnitude=12)),
    ("auto_augment", {}), ("color_jitter", dict(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1))])
def test_each_batch_is_its_positions_draws_applied(policy, options):
    src = batches()
    aug = PolicyAugment(policy, seed=3, interpolation="bilinear", fill=[5, 6, 7], **options)
    with prefetch.Prefetcher(src, device="cpu", transform=aug) as pf:
        for epoch in range(2):
            count = 0
            for index, (got, (images, labels)) in enumerate(zip(pf, src)):
                table = aug.draws(N, H, W, epoch, index, 0)
                want = apply_table(images, table, interpolation="bilinear", fill=[5, 6, 7])
                assert torch.equal(got[0], want) and torch.equal(got[1], labels)
                count += 1
            assert count == len(src)
    # each sample its own draw: not one set of parameters for the batch
    table = aug.draws(64, H, W, 0, 0, 0)
    assert len({tuple(map(tuple, [(o, round(m, 4)) for o, m in table.steps(i)])) for i in range(64)}) > 8


def test_nhwc_batches_get_the_same_pixels_in_their_layout():
    aug = PolicyAugment("trivial_augment_wide", seed=5)
    nchw = [b[0] for b in prefetch.Prefetcher(batches(), device="cpu", transform=aug)]
    nhwc = [b[0] for b in prefetch.Prefetcher(batches(layout="NHWC"), device="cpu", transform=aug)]
    for a, b in zip(nchw, nhwc):
        assert b.shape == (N, H, W, 3) and torch.equal(a.permute(0, 2, 3, 1), b)


def test_the_seed_decides_the_draws_and_a_resume_adopts_it():
    run = lambda aug: [b[0] for b in prefetch.Prefetcher(batches(), device="cpu", transform=aug)]  # noqa: E731
    a, b = run(PolicyAugment("rand_augment", seed=1)), run(PolicyAugment("rand_augment", seed=1))
    c = run(PolicyAugment("rand_augment", seed=2))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))
    drawn = PolicyAugment("auto_augment")  # seed=None: drawn, saved, adopted
    state = drawn.state_dict()
    fresh = PolicyAugment("auto_augment")
    fresh.load_state_dict(state)
    assert fresh.seed == drawn.seed
    with pytest.raises(ValueError, match="saved with PolicyAugment seed .* different policy draws"):
        PolicyAugment("auto_augment", seed=drawn.seed + 1).load_state_dict(state)
    with pytest.raises(ValueError, match="no seed for this PolicyAugment"):
        PolicyAugment("auto_augment").load_state_dict(None)


def test_bad_policies_options_and_images_are_named():
    with pytest.raises(ValueError, match="policy must be one of .*'trivial'"):
        PolicyAugment("trivial")
    with pytest.raises(TypeError, match=r"does not take num_ops; its options are num_magnitude_bins"):
        PolicyAugment("trivial_augment_wide", num_ops=2)
    with pytest.raises(ValueError, match="magnitude"):
        PolicyAugment("rand_augment", magnitude=40)
    with pytest.raises(ValueError, match="hue"):
        PolicyAugment("color_jitter", hue=0.7)
    aug = PolicyAugment("trivial_augment_wide", seed=0)
    with pytest.raises(ValueError, match=r"uint8 image batch .* at leaf 0, got a torch.float32"):
        aug((torch.zeros(2, 3, 4, 4), 0))
    with pytest.raises(ValueError, match="4 channels in layout NCHW"):
        aug((torch.zeros(2, 4, 5, 5, dtype=torch.uint8),))
    out = aug((torch.full((2, 3, 5, 5), 9, dtype=torch.uint8), "label"))  # a direct call
    assert out[0].dtype == torch.uint8 and out[0].shape == (2, 3, 5, 5) and out[1] == "label"


def test_an_array_loader_resumed_mid_epoch_draws_what_the_interrupted_run_would_have():
    g = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (48, 3, 12, 10), dtype=torch.uint8, generator=g)
    labels = torch.arange(48)

    def loader(aug):
        return prefetch.ArrayLoader((images, labels), batch_size=8, shuffle=True, seed=4,
                                    device="cpu", transform=aug)

    whole = loader(PolicyAugment("trivial_augment_wide", interpolation="bilinear"))
    whole.set_epoch(1)
    want = [(x.clone(), y.clone()) for x, y in whole]
    first = loader(whole.transform)
    first.set_epoch(1)
    it = iter(first)
    got = [tuple(t.clone() for t in next(it)) for _ in range(2)]
    state = first.state_dict()
    del it
    resumed = loader(PolicyAugment("trivial_augment_wide", interpolation="bilinear"))  # seed=None
    resumed.load_state_dict(state)
    got += [(x.clone(), y.clone()) for x, y in resumed]
    assert len(got) == len(want)
    for (a, b), (c, d) in zip(got, want):
        assert torch.equal(a, c) and torch.equal(b, d)


def test_the_readmes_policy_augments_construct_as_written():
    from ..helpers import ROOT

    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    lines = [line.split("=", 1)[1].strip() for line in text.splitlines()
             if "PolicyAugment(" in line and line.lstrip().startswith("aug =")]
    assert lines
    for expression in lines:
        aug = eval(expression, {"prefetch": prefetch})
        assert isinstance(aug, PolicyAugment)
