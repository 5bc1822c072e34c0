"""prefetch.transforms.v2 (prefetch/transforms/v2.py): torchvision's recipe names compiled into
prefetch transforms. Without a policy a recipe is one FusedAugment with the recipe's arguments;
with one, the uint8 geometry, the policy on it, then the normalisation — each checked against
the pieces it is made of, the normalisation against float64; the refusals name the step."""
import pytest
import torch

import prefetch
from prefetch.transforms import BatchPosition, FusedAugment, PolicyAugment, v2 as T
from prefetch.transforms.erasing import RandomErasing

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def images(n=8, h=24, w=20, seed=0):
    return torch.randint(0, 256, (n, h, w, 3), dtype=torch.uint8,
                         generator=torch.Generator().manual_seed(seed))


def test_a_recipe_without_a_policy_is_one_fused_augment_with_its_arguments():
    c = T.Compose([T.RandomResizedCrop(16, scale=(0.2, 1.0)), T.RandomHorizontalFlip(0.3),
                   T.PILToTensor(), T.ToDtype(torch.bfloat16, scale=True), T.Normalize(MEAN, STD)],
                  seed=7)
    (fused,) = c.transforms
    assert isinstance(fused, FusedAugment) and fused.seed == 7 and fused.hflip == 0.3
    want = FusedAugment(MEAN, STD, random_resized_crop=16, scale=(0.2, 1.0), hflip=0.3, vflip=0.0,
                        dtype=torch.bfloat16, seed=7)
    x = images()
    at = BatchPosition(2, 3, 0)
    assert torch.equal(c.apply((x, 1), at)[0], want.apply((x, 1), at)[0])
    val = T.Compose([T.Resize(20), T.CenterCrop(16), T.ToDtype(torch.float32, scale=True),
                     T.Normalize(MEAN, STD)], seed=1)
    ref = FusedAugment(MEAN, STD, resize=20, crop=16, center_crop=True, hflip=0.0, seed=1)
    assert torch.equal(val.apply((x, 1), at)[0], ref.apply((x, 1), at)[0])


def test_bicubic_windows_compile_to_a_bicubic_fused_augment():
    """DeiT's and ConvNeXt's windows: RandomResizedCrop and Resize with InterpolationMode.BICUBIC."""
    train = T.Compose([T.RandomResizedCrop(16, interpolation=T.InterpolationMode.BICUBIC),
                       T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True),
                       T.Normalize(MEAN, STD)], seed=4)
    (fused,) = train.transforms
    assert fused.interpolation == "bicubic"
    want = FusedAugment(MEAN, STD, random_resized_crop=16, interpolation="bicubic", seed=4)
    x = images()
    at = BatchPosition(0, 1, 0)
    assert torch.equal(train.apply((x, 1), at)[0], want.apply((x, 1), at)[0])
    assert not torch.equal(train.apply((x, 1), at)[0],
                           FusedAugment(MEAN, STD, random_resized_crop=16, seed=4).apply((x, 1), at)[0])
    val = T.Compose([T.Resize(20, interpolation="bicubic"), T.CenterCrop(16),
                     T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])
    ref = FusedAugment(MEAN, STD, resize=20, crop=16, center_crop=True, hflip=0.0,
                       interpolation="bicubic")
    assert torch.equal(val.apply((x, 1), at)[0], ref.apply((x, 1), at)[0])


def test_a_recipe_with_a_policy_is_the_uint8_geometry_the_policy_and_the_normalisation():
    recipe = [T.RandomCrop(16, padding=2), T.RandomHorizontalFlip(),
              T.TrivialAugmentWide(interpolation="bilinear"), T.ToDtype(torch.float32, scale=True),
              T.Normalize(MEAN, STD), T.RandomErasing(0.5, value=-7.0)]
    c = T.Compose(recipe, seed=3)
    fused, policy, _, erase = c.transforms
    assert isinstance(policy, PolicyAugment) and isinstance(erase, RandomErasing)
    assert fused.dtype == torch.uint8  # the geometry's pixels, rounded in the kernel's store
    x = images()
    at = BatchPosition(1, 4, 0)
    got = c.apply((x, 0), at)[0]
    # the pieces: the geometry as uint8 (a crop: exact), the policy, then normalisation
    geometry = FusedAugment((0.0,) * 3, (1 / 255,) * 3, crop=16, padding=2, hflip=0.5, vflip=0.0,
                            seed=fused.seed)
    u8 = geometry.apply((x, 0), at)[0].round().to(torch.uint8)
    plain = FusedAugment((0.0,) * 3, (1.0,) * 3, crop=16, padding=2, hflip=0.5, vflip=0.0,
                         seed=fused.seed).apply((x, 0), at)[0]
    assert torch.equal(u8.double(), torch.round(plain.double() * 255))  # the crop is exact
    augmented = policy.apply((u8, 0), at)[0]
    normalized = (augmented.double() / 255 - torch.tensor(MEAN).view(1, 3, 1, 1)) \
        / torch.tensor(STD).view(1, 3, 1, 1)
    erased, boxes = erase.boxes(8, 16, 16, *at)
    for i in range(8):
        if erased[i]:
            t, l, bh, bw = boxes[i].tolist()
            normalized[i, :, t:t + bh, l:l + bw] = -7.0
    assert got.dtype == torch.float32 and torch.allclose(got.double(), normalized, atol=1e-5)


def test_through_a_prefetcher_with_a_policy_and_reproducible():
    batches = [(images(seed=k), torch.arange(8)) for k in range(3)]
    recipe = lambda: T.Compose([T.RandomResizedCrop(12), T.RandomHorizontalFlip(),  # noqa: E731
                                T.RandAugment(num_ops=2, magnitude=9),
                                T.ToDtype(torch.float16, scale=True), T.Normalize(MEAN, STD)],
                               seed=5)
    a = [b[0] for b in prefetch.Prefetcher(batches, device="cpu", transform=recipe())]
    b = [b[0] for b in prefetch.Prefetcher(batches, device="cpu", transform=recipe())]
    assert all(x.shape == (8, 3, 12, 12) and x.dtype == torch.float16 for x in a)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("steps, match", [
    ([T.ToDtype(torch.float32, scale=True), T.RandomResizedCrop(8)], r"step 1 \(RandomResizedCrop\)"),
    ([T.Normalize(MEAN, STD), T.ToDtype(torch.float32, scale=True)], r"step 0 \(Normalize\)"),
    ([T.RandomErasing(), T.ToDtype(torch.float32, scale=True)], r"step 0 \(RandomErasing\).*after ToDtype"),
    ([T.ToDtype(torch.float32, scale=True), T.TrivialAugmentWide()], r"step 1 \(TrivialAugmentWide\).*before ToDtype"),
    ([T.RandomCrop(8), T.RandomResizedCrop(8), T.ToDtype(torch.float32, scale=True)], "one geometry"),
    ([T.ColorJitter(0.1), T.TrivialAugmentWide(), T.ToDtype(torch.float32, scale=True)], "one policy"),
    ([T.RandomResizedCrop(8)], "needs ToDtype"),
    ([T.Resize(10), T.ToDtype(torch.float32, scale=True)], "followed by CenterCrop"),
    ([lambda x: x, T.ToDtype(torch.float32, scale=True)], r"step 0 \(function\) is not one .* DataLoader's workers"),
])
def test_recipes_out_of_the_subset_or_order_are_refused_naming_the_step(steps, match):
    with pytest.raises(ValueError, match=match):
        T.Compose(steps)


def test_arguments_outside_the_subset_are_refused():
    with pytest.raises(ValueError, match="scale=True"):
        T.ToDtype(torch.float32)
    with pytest.raises(ValueError, match="'bilinear' or 'bicubic'"):
        T.RandomResizedCrop(8, interpolation="nearest")
    with pytest.raises(ValueError, match="ImageNet"):
        T.AutoAugment(policy="cifar10")
    with pytest.raises(ValueError, match="padding_mode must be 'constant'"):
        T.RandomCrop(8, padding=(1, 2), padding_mode="edge")
    with pytest.raises(ValueError, match="decode=True needs RandomResizedCrop"):
        T.Compose([T.RandomCrop(8), T.ToDtype(torch.float32, scale=True)], decode=True)


def test_the_readmes_ported_recipe_compiles_as_written():
    import os

    from ..helpers import ROOT

    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    start = text.index("from prefetch.transforms import v2 as T")
    block = text[start:text.index("```", start)]
    namespace = {"torch": torch, "prefetch": prefetch}
    exec(block, namespace)
    assert isinstance(namespace["train"], T.Compose) and isinstance(namespace["val"], T.Compose)



POLICIES = {"trivial": lambda: T.TrivialAugmentWide(interpolation="bilinear"),
            "rand": lambda: T.RandAugment(num_ops=2, magnitude=9),
            "auto": lambda: T.AutoAugment(),
            "jitter": lambda: T.ColorJitter(0.4, 0.4, 0.4, 0.1)}


def _full_recipe(policy):
    return T.Compose([T.RandomResizedCrop(28), T.RandomHorizontalFlip(), POLICIES[policy](),
                      T.PILToTensor(), T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD),
                      T.RandomErasing(0.5),
                      T.RandomChoice([T.MixUp(alpha=0.2, num_classes=10),
                                      T.CutMix(alpha=1.0, num_classes=10)])], seed=4)


def _stage_by_stage(recipe, images, labels, at):
    """Each of the recipe's transforms in turn: [(its name, its images on the CPU)]."""
    batch, out = (images, labels), []
    for t in recipe.transforms:
        batch = t.apply(batch, at)
        out.append((type(t).__name__, batch[0].cpu()))
    return out, batch[1].cpu()


@pytest.mark.cuda
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_on_cuda_a_whole_recipe_gives_the_cpus_batches(policy):
    """The README's recipe with each policy and a MixUp/CutMix choice, on the GPU and on the CPU
    from the same seed: every kernel of the chain (resample, the policy's ops, normalisation,
    erasing, mixing) and the draws. The uint8 stages must be the same bytes — a level's
    difference there can change a whole image further on (Solarize's threshold, Equalize's
    table) — and the float ones the same values up to float32 rounding; on a mismatch the message
    names each stage's largest difference and the share of values that differ."""
    from ..conftest import require_cuda
    require_cuda()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 256, (32, 40, 36, 3), dtype=torch.uint8, generator=g),
                torch.randint(0, 10, (32,), generator=g)) for _ in range(3)]
    recipe = _full_recipe(policy)
    at = BatchPosition(0, 1, 0)
    x, labels = batches[1]
    cpu, cpu_targets = _stage_by_stage(recipe, x, labels, at)
    cuda, cuda_targets = _stage_by_stage(recipe, x.cuda(), labels.cuda(), at)
    report = []
    for (name, a), (_, b) in zip(cpu, cuda):
        diff = (a.double() - b.double()).abs()
        report.append("%s %s: max %.3g, %.3g%% of values differ" % (
            name, a.dtype, diff.max(), 100 * (diff > 0).double().mean()))
    for (name, a), (_, b) in zip(cpu, cuda):
        assert a.shape == b.shape and a.dtype == b.dtype, name
        if a.dtype == torch.uint8:
            assert torch.equal(a, b), "\n".join(report)
        else:
            torch.testing.assert_close(b, a, rtol=0, atol=1e-5, msg="\n".join(report))
    torch.testing.assert_close(cuda_targets, cpu_targets, rtol=0, atol=1e-6)

    # The same through a Prefetcher on each device: the loader's device path changes nothing.
    def run(device):
        with prefetch.Prefetcher(batches, device=device, transform=_full_recipe(policy)) as loader:
            return [(images.cpu(), targets.cpu(), images.device.type) for images, targets in loader]

    on_cpu, on_cuda = run("cpu"), run("cuda")
    assert len(on_cpu) == len(on_cuda) == 3
    for (a, t, _), (b, u, where) in zip(on_cpu, on_cuda):
        assert where == "cuda" and b.shape == a.shape == (32, 3, 28, 28)
        torch.testing.assert_close(b, a, rtol=0, atol=1e-5)
        torch.testing.assert_close(u, t, rtol=0, atol=1e-6)
