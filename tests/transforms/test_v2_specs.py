"""prefetch.transforms.v2's steps describe themselves (prefetch/transforms/v2_plan.py): each says
its phase and sets its part of the plan, and Compose checks every step's order and duplicates the
same way. Checked against torchvision's recipe order written out here, and by a step defined in
this file (a new name is one class) compiled against the transforms it is made of."""
import inspect
import itertools

import pytest
import torch

from prefetch.transforms import BatchPosition, FusedAugment, Transform, get_leaf, set_leaf
from prefetch.transforms import v2 as T
from prefetch.transforms.v2_plan import Phase, Plan, Spec

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

# torchvision's recipe order (its reference recipes, references/classification/presets.py):
# 0 geometry and flips, 1 the policy (ToImage may come up to here), 2 ToDtype, 3 Normalize,
# 4 RandomErasing, 5 MixUp/CutMix on the batch.
ORDER = {"RandomResizedCrop": 0, "Resize": 0, "CenterCrop": 0, "RandomCrop": 0, "Pad": 0,
         "RandomHorizontalFlip": 0, "RandomVerticalFlip": 0, "TrivialAugmentWide": 1,
         "RandAugment": 1, "AutoAugment": 1, "ColorJitter": 1, "AugMix": 1, "ToImage": 1,
         "PILToTensor": 1,
         "ToDtype": 2, "Normalize": 3, "RandomErasing": 4, "MixUp": 5, "CutMix": 5,
         "RandomChoice": 5}
# torchvision's single-op random transforms and RandomApply: photometric, any number of them.
SINGLE_OPS = ("RandomGrayscale", "Grayscale", "RandomSolarize", "RandomInvert", "RandomPosterize",
              "RandomAdjustSharpness", "RandomAutocontrast", "RandomEqualize", "RandomApply",
              "RandomAffine", "RandomRotation", "RandomOrder", "GaussianBlur")
ORDER.update({name: 1 for name in SINGLE_OPS})
REPEATABLE = {"RandomErasing", "ToImage", "PILToTensor", *SINGLE_OPS}  # the others go once

EXAMPLES = {
    "RandomResizedCrop": lambda: T.RandomResizedCrop(8), "Resize": lambda: T.Resize(10),
    "CenterCrop": lambda: T.CenterCrop(8), "RandomCrop": lambda: T.RandomCrop(8, padding=1),
    "Pad": lambda: T.Pad(2),
    "RandomHorizontalFlip": lambda: T.RandomHorizontalFlip(),
    "RandomVerticalFlip": lambda: T.RandomVerticalFlip(0.25),
    "TrivialAugmentWide": lambda: T.TrivialAugmentWide(), "RandAugment": lambda: T.RandAugment(),
    "AutoAugment": lambda: T.AutoAugment(), "ColorJitter": lambda: T.ColorJitter(0.2),
    "ToImage": lambda: T.ToImage(), "PILToTensor": lambda: T.PILToTensor(),
    "ToDtype": lambda: T.ToDtype(torch.float32, scale=True),
    "Normalize": lambda: T.Normalize(MEAN, STD), "RandomErasing": lambda: T.RandomErasing(0.3),
    "MixUp": lambda: T.MixUp(num_classes=4), "CutMix": lambda: T.CutMix(num_classes=4),
    "RandomChoice": lambda: T.RandomChoice([T.MixUp(num_classes=4), T.CutMix(num_classes=4)]),
    "RandomGrayscale": lambda: T.RandomGrayscale(0.2), "Grayscale": lambda: T.Grayscale(3),
    "RandomSolarize": lambda: T.RandomSolarize(128), "RandomInvert": lambda: T.RandomInvert(),
    "RandomPosterize": lambda: T.RandomPosterize(4),
    "RandomAdjustSharpness": lambda: T.RandomAdjustSharpness(2.0),
    "RandomAutocontrast": lambda: T.RandomAutocontrast(),
    "RandomEqualize": lambda: T.RandomEqualize(),
    "RandomApply": lambda: T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
    "RandomAffine": lambda: T.RandomAffine(10, translate=(0.1, 0.1)),
    "RandomRotation": lambda: T.RandomRotation(15),
    "RandomOrder": lambda: T.RandomOrder([T.RandomInvert(), T.ColorJitter(0.2)]),
    "AugMix": lambda: T.AugMix(),
    "GaussianBlur": lambda: T.GaussianBlur(3, (0.1, 2.0)),
}


def test_every_step_is_a_spec_in_torchvisions_order_with_its_documentation():
    steps = [n for n in T.__all__ if n not in ("Compose", "InterpolationMode", "AutoAugmentPolicy",
                                               "MultiView")]
    assert sorted(steps) == sorted(ORDER)
    for name in steps:
        cls = getattr(T, name)
        assert issubclass(cls, Spec) and cls.phase == ORDER[name], name
        assert isinstance(cls.rule, str) and cls.rule, name
        assert (cls.slot is None) == (name in REPEATABLE), name
        doc = inspect.getdoc(cls)
        assert doc and "torchvision" in doc, name
        if len(inspect.signature(cls).parameters) > 0:  # ToImage and PILToTensor take none
            assert "Args:" in doc and "Raises:" in doc, name


def _recipe_out_of_order(a, b):
    """[a, b] after a ToDtype when either needs one (a may not be ToDtype then)."""
    prefix = [EXAMPLES["ToDtype"]()] if max(ORDER[a], ORDER[b]) > 2 and a != "ToDtype" else []
    return prefix + [EXAMPLES[a](), EXAMPLES[b]()]


PAIRS = [(a, b) for a, b in itertools.permutations(ORDER, 2)
         if ORDER[a] > ORDER[b] and a not in ("ToImage", "PILToTensor")]


@pytest.mark.parametrize("a,b", PAIRS, ids=["%s-%s" % p for p in PAIRS])
def test_a_step_after_one_of_a_later_phase_is_refused_naming_both(a, b):
    steps = _recipe_out_of_order(a, b)
    k = len(steps) - 1
    # the first step of a later phase than b's: the one b comes after
    j, later = next((i, type(s).__name__) for i, s in enumerate(steps)
                    if ORDER[type(s).__name__] > ORDER[b])
    with pytest.raises(ValueError, match=r"^prefetch: step %d \(%s\) comes after %s \(step %d\)"
                                         % (k, b, later, j)):
        T.Compose(steps)


ONCE = sorted(set(ORDER) - REPEATABLE)


@pytest.mark.parametrize("name", ONCE)
def test_a_second_step_where_one_goes_is_refused_naming_the_first(name):
    first, second = EXAMPLES[name](), EXAMPLES[name]()
    prefix = [EXAMPLES["ToDtype"]()] if ORDER[name] > 2 else []
    k = len(prefix)
    with pytest.raises(ValueError) as info:
        T.Compose(prefix + [first, second])
    message = str(info.value)
    assert message.startswith("prefetch: step %d (%s) sets " % (k + 1, name)), message
    assert "which step %d, %r, set already" % (k, first) in message, message


@pytest.mark.parametrize("name", sorted(REPEATABLE))
def test_the_steps_that_repeat_are_taken_twice(name):
    steps = [EXAMPLES[name](), EXAMPLES[name]()]
    steps = [EXAMPLES["ToDtype"]()] + steps if ORDER[name] > 2 else steps + [EXAMPLES["ToDtype"]()]
    T.Compose(steps, seed=0)


def test_normalize_after_random_erasing_is_refused():
    """torchvision erases the float image and then normalises the box with the rest; the
    compiled normalisation runs in FusedAugment's pass, before any erasing, so that order would
    erase with a value after normalisation: refused."""
    with pytest.raises(ValueError,
                       match=r"step 2 \(Normalize\) comes after RandomErasing \(step 1\)"):
        T.Compose([T.ToDtype(torch.float32, scale=True), T.RandomErasing(), T.Normalize(MEAN, STD)])


def test_each_compiled_transform_gets_its_seed_by_its_place():
    """FusedAugment index 0, the policy 1 (kept when there is none), then the float stages in
    order: ``seed + k * 0x9E3779B97F4A7C15 mod 2**63`` (written out here)."""
    def derived(seed, k):
        return (seed + k * 0x9E3779B97F4A7C15) % (1 << 63)

    tail = [T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD), T.RandomErasing(0.1),
            T.RandomErasing(0.2), T.MixUp(num_classes=4)]
    fused, *rest = T.Compose([T.RandomResizedCrop(8)] + tail, seed=11).transforms
    assert [t.seed for t in [fused] + rest] == [derived(11, k) for k in (0, 2, 3, 4)]
    fused, policy, _, *rest = T.Compose([T.RandomResizedCrop(8), T.RandAugment()] + tail,
                                        seed=11).transforms
    assert [t.seed for t in [fused, policy] + rest] == [derived(11, k) for k in range(5)]


# ---- a new name is one class -----------------------------------------------------------------

class _Invert(Transform):
    """255 - x of the uint8 NCHW images with probability p per sample (a step's compiled form)."""

    def __init__(self, p, seed, image_key):
        self.p, self.seed, self.image_key = p, seed, image_key

    def apply(self, batch, position):
        x = get_leaf(batch, self.image_key)
        g = torch.Generator().manual_seed(hash((self.seed, position.index)) % (1 << 62))
        chosen = (torch.rand(x.shape[0], generator=g) < self.p).view(-1, 1, 1, 1).to(x.device)
        return set_leaf(batch, self.image_key, torch.where(chosen, 255 - x, x))


class RandomInvert(Spec):
    """torchvision's ``RandomInvert(p=0.5)``, as a new name would be written: one class."""

    phase = Phase.PHOTOMETRIC
    rule = "RandomInvert goes on the uint8 images, before ToDtype"

    def __init__(self, p=0.5):
        self.p = p

    def contribute(self, plan: Plan) -> None:
        plan.add_stage(lambda seed: _Invert(self.p, seed, plan.image_key))


def test_a_step_defined_outside_the_module_compiles_with_the_others():
    x = torch.randint(0, 256, (6, 20, 18, 3), dtype=torch.uint8,
                      generator=torch.Generator().manual_seed(0))
    at = BatchPosition(1, 2, 0)
    recipe = T.Compose([T.RandomCrop(12, padding=2), T.RandomHorizontalFlip(), RandomInvert(1.0),
                        T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)], seed=9)
    fused, invert, _ = recipe.transforms
    assert isinstance(invert, _Invert) and fused.dtype == torch.uint8
    # the pieces: the window as uint8 (a crop: exact), inverted, normalised in float64
    window = FusedAugment((0.0,) * 3, (1.0,) * 3, crop=12, padding=2, hflip=0.5, vflip=0.0,
                          seed=9).apply((x,), at)[0]
    window = torch.round(window.double() * 255)  # its [0, 1] values as the uint8 levels
    want = ((255 - window) / 255 - torch.tensor(MEAN).view(1, 3, 1, 1)) \
        / torch.tensor(STD).view(1, 3, 1, 1)
    got = recipe.apply((x, 0), at)[0]
    assert got.dtype == torch.float32 and torch.allclose(got.double(), want, atol=1e-5)
    # it repeats (no slot): twice is the identity; the policy before it keeps its seed
    twice = T.Compose([T.RandomCrop(12, padding=2), T.RandomHorizontalFlip(), RandomInvert(1.0),
                       RandomInvert(1.0), T.ToDtype(torch.float32, scale=True)], seed=9)
    plain = T.Compose([T.RandomCrop(12, padding=2), T.RandomHorizontalFlip(),
                       T.ToDtype(torch.float32, scale=True)], seed=9)
    assert torch.equal(twice.apply((x, 0), at)[0], plain.apply((x, 0), at)[0])
    with_policy = T.Compose([T.CenterCrop(12), T.RandAugment(), RandomInvert(),
                             T.ToDtype(torch.float32, scale=True)], seed=9).transforms
    assert with_policy[1].seed == T.Compose([T.CenterCrop(12), T.RandAugment(),
                                             T.ToDtype(torch.float32, scale=True)],
                                            seed=9).transforms[1].seed
    # and its place is checked as every step's
    with pytest.raises(ValueError, match=r"step 1 \(RandomInvert\) comes after ToDtype \(step 0\): "
                                         r"RandomInvert goes on the uint8 images"):
        T.Compose([T.ToDtype(torch.float32, scale=True), RandomInvert()])


class _HalfFlip(Spec):
    """A step that sets FusedAugment's hflip without a slot of its own."""

    phase = Phase.GEOMETRY
    rule = "a test's flip"

    def contribute(self, plan):
        plan.set_fused(hflip=0.25)


def test_an_argument_two_steps_set_is_refused_naming_both_and_the_values():
    with pytest.raises(ValueError) as info:
        T.Compose([T.RandomHorizontalFlip(0.5), _HalfFlip(), T.ToDtype(torch.float32, scale=True)])
    assert str(info.value) == (
        "prefetch: step 1 (_HalfFlip) sets FusedAugment's hflip to 0.25, which step 0, "
        "RandomHorizontalFlip(p=0.5), set already to 0.5: a test's flip")


def test_a_step_without_its_place_is_refused_when_its_class_is_written():
    with pytest.raises(TypeError, match=r"v2 step RandomThing needs a phase .* and a rule"):
        type("RandomThing", (Spec,), {"rule": "anywhere"})
    with pytest.raises(TypeError, match=r"v2 step RandomThing needs a phase"):
        type("RandomThing", (Spec,), {"phase": Phase.ERASE})


@pytest.mark.parametrize("name", sorted(n for n in ORDER if ORDER[n] in (0, 1, 4)))
def test_every_step_reads_the_recipes_image_key(name):
    # A dict batch with image_key="image" gives what a tuple batch at leaf 0 gives: every
    # compiled stage reads the recipe's leaf (the uint8 stages read leaf 0 whatever the key was).
    x = torch.randint(0, 256, (6, 20, 26, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    window = [] if ORDER[name] == 0 else [T.RandomResizedCrop(12)]
    tail = [T.ToDtype(torch.float32, scale=True)]
    steps = window + ([EXAMPLES[name]()] + tail if ORDER[name] < 2 else tail + [EXAMPLES[name]()])
    if name == "Resize":
        steps.insert(1, T.CenterCrop(8))
    if name == "Pad":
        steps.insert(1, T.RandomCrop(12))
    at = BatchPosition(0, 2, 0)
    by_key = T.Compose(steps, image_key="image", label_key="label", seed=4).apply(
        {"image": x, "label": torch.arange(6)}, at)
    by_index = T.Compose(steps, seed=4).apply((x, torch.arange(6)), at)
    assert torch.equal(by_key["image"], by_index[0]) and torch.equal(by_key["label"], by_index[1])
