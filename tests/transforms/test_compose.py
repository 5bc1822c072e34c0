"""Compose (prefetch/transforms/compose.py): members applied in order at the same position, the
first member's gathering and host stage kept, every member's state saved and restored, and the
orders a loader could not honour refused."""
import pytest
import torch

import prefetch
from prefetch.transforms import (Compose, PolicyAugment, RandomErasing, has_host_stage,
                                 gathered_keys)


def test_members_run_in_order_at_the_same_position():
    seen = []

    class Record(prefetch.transforms.Transform):
        def __init__(self, tag):
            self.tag = tag

        def apply(self, batch, position):
            seen.append((self.tag, tuple(position)))
            return batch + [self.tag]

    c = Compose([Record("a"), lambda b: b + ["f"], Record("b")])
    assert c.apply([], (3, 4, 1)) == ["a", "f", "b"]
    assert seen == [("a", (3, 4, 1)), ("b", (3, 4, 1))]


def test_the_first_members_gathers_and_host_stage_are_the_composes():
    fused = prefetch.FusedAugment(mean=(0.5,) * 3, std=(0.2,) * 3, seed=1)
    decode = prefetch.FusedAugment(mean=(0.5,) * 3, std=(0.2,) * 3, random_resized_crop=8,
                                   decode=True, seed=1)
    assert gathered_keys(Compose([fused, RandomErasing(seed=0)])) == (0,)
    assert not has_host_stage(Compose([fused, RandomErasing(seed=0)]))
    assert has_host_stage(Compose([decode, RandomErasing(seed=0)]))
    with pytest.raises(ValueError, match="member 1 \\(FusedAugment\\) gathers"):
        Compose([RandomErasing(seed=0), fused])
    class Decode(prefetch.transforms.Transform):  # a host stage, no gathering
        def host_apply(self, batch, position, device):
            return batch

        def apply(self, batch, position):
            return batch

    assert has_host_stage(Compose([Decode(), lambda b: b]))
    with pytest.raises(ValueError, match="host stage \\(Decode\\) must come before"):
        Compose([lambda b: b, Decode()])
    with pytest.raises(TypeError, match="member 0 is a int"):
        Compose([3])
    with pytest.raises(ValueError, match="at least one"):
        Compose([])


def test_every_members_seed_is_saved_and_adopted_through_a_loader():
    images = torch.randint(0, 256, (24, 3, 10, 10), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(0))

    def loader(c):
        return prefetch.ArrayLoader((images,), batch_size=8, shuffle=True, seed=2, device="cpu",
                                    transform=c)

    first = Compose([PolicyAugment("trivial_augment_wide"), RandomErasing(0.5)])
    want = [b[0].clone() for b in loader(first)]
    state = loader(first).state_dict()
    resumed = Compose([PolicyAugment("trivial_augment_wide"), RandomErasing(0.5)])  # seeds drawn
    l2 = loader(resumed)
    l2.load_state_dict(state)
    assert [t.seed for t in resumed.transforms] == [t.seed for t in first.transforms]
    assert all(torch.equal(a, b[0]) for a, b in zip(want, l2))
    with pytest.raises(ValueError, match="2 transforms' states; this Compose has 1"):
        Compose([RandomErasing(seed=1)]).load_state_dict(first.state_dict())


def test_gather_is_the_first_members_then_the_others_apply():
    images = torch.randint(0, 256, (20, 3, 8, 8), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(1))
    fused = prefetch.FusedAugment(mean=(0.5,) * 3, std=(0.2,) * 3, hflip=0.5, seed=3)
    erase = RandomErasing(1.0, value=-9.0, seed=4)
    indices = torch.tensor([3, 17, 5, 0])
    at = prefetch.transforms.BatchPosition(1, 2, 0)
    got = Compose([fused, erase]).gather((images, torch.arange(4)), indices, at)
    want = erase.apply(fused.gather((images, torch.arange(4)), indices, at), at)
    assert torch.equal(got[0], want[0]) and bool((got[0] == -9.0).any())


def test_the_readmes_compose_constructs_as_written():
    import os

    from ..helpers import ROOT

    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    start = text.index("aug = prefetch.transforms.Compose([")
    block = text[start:text.index("```", start)]
    namespace = {"prefetch": prefetch, "mean": (0.5,) * 3, "std": (0.25,) * 3}
    exec(block, namespace)
    assert isinstance(namespace["aug"], Compose) and len(namespace["aug"].transforms) == 2


def test_decoding_is_a_host_stage_only_before_a_copy_to_a_gpu():
    mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    decode = prefetch.FusedAugment(mean, std, random_resized_crop=8, decode=True, seed=0)
    for t in (decode, Compose([decode, RandomErasing(seed=0)])):
        assert has_host_stage(t) and has_host_stage(t, "cuda")
        # On the CPU the loader hands the encoded batch to the engine as it is (an ArrayLoader's
        # byte ranges stay a C++ gather) and apply() decodes.
        assert not has_host_stage(t, "cpu") and not has_host_stage(t, torch.device("cpu"))
    assert not has_host_stage(prefetch.FusedAugment(mean, std), "cuda")
