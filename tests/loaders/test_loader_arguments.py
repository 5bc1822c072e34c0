"""Every argument of the loaders is checked when the loader is built, with a message naming the
loader and the argument (issue 43, the kind of item 8 for the loaders): a bool where a count goes
(depth=True was a depth of 1), a float where a whole number of bytes goes (1.5 was truncated to
1; NaN and inf raised int()'s own errors), a string or NaN where True or False goes
(shuffle="no" shuffled), a fractional seed."""
import pytest
import torch

import prefetch

BAD = [
    ("Prefetcher", "depth", True), ("Prefetcher", "depth", 0), ("Prefetcher", "depth", 2.0),
    ("Prefetcher", "num_threads", True), ("Prefetcher", "num_threads", 1.5),
    ("Prefetcher", "max_batch_bytes", float("nan")), ("Prefetcher", "max_batch_bytes", float("inf")),
    ("Prefetcher", "max_batch_bytes", 1.5), ("Prefetcher", "max_batch_bytes", True),
    ("Prefetcher", "max_batch_bytes", 0), ("Prefetcher", "timeout", True),
    ("Prefetcher", "timeout", float("nan")), ("Prefetcher", "timeout", -1),
    ("ArrayLoader", "batch_size", True), ("ArrayLoader", "batch_size", 2.0),
    ("ArrayLoader", "shuffle", "no"), ("ArrayLoader", "shuffle", float("nan")),
    ("ArrayLoader", "shuffle", 1), ("ArrayLoader", "drop_last", "False"),
    ("ArrayLoader", "seed", 1.5), ("ArrayLoader", "seed", True),
    ("ArrayLoader", "memory_fraction", 0.0), ("ArrayLoader", "memory_fraction", float("nan")),
    ("ArrayLoader", "memory_fraction", True), ("ArrayLoader", "memory_fraction", "half"),
    ("ArrayLoader", "resident", "gpu"), ("ArrayLoader", "resident", ["host"]),
    ("ArrayLoader", "depth", True), ("ArrayLoader", "num_threads", 0),
    ("ArrayLoader", "timeout", 0), ("ArrayLoader", "transform", 3),
]


def build(loader, **kwargs):
    if loader == "Prefetcher":
        return prefetch.Prefetcher([torch.zeros(2)], device="cpu", **kwargs)
    batch_size = kwargs.pop("batch_size", 2)
    return prefetch.ArrayLoader(torch.arange(6), batch_size, **kwargs)


@pytest.mark.parametrize("loader, name, value", BAD, ids=lambda v: repr(v))
def test_a_bad_loader_argument_is_refused_naming_the_loader_and_the_argument(loader, name, value):
    with pytest.raises((ValueError, TypeError)) as info:
        build(loader, **{name: value})
    message = str(info.value)
    assert message.startswith("prefetch: %s %s " % (loader, name)), message
    assert repr(value) in message, message


@pytest.mark.parametrize("loader", ["Prefetcher", "ArrayLoader"])
def test_good_loader_arguments_still_build(loader):
    import numpy as np

    good = dict(depth=2, num_threads=1, timeout=float("inf"))
    if loader == "Prefetcher":
        good.update(max_batch_bytes=1 << 20)
    else:
        good.update(shuffle=np.bool_(False), drop_last=True, seed=np.int64(3), memory_fraction=1)
    with build(loader, **good) as built:
        assert len(list(built)) >= 1


@pytest.mark.parametrize("loader", ["Prefetcher", "ArrayLoader"])
@pytest.mark.parametrize("epoch, error", [(1.5, TypeError), (True, TypeError), ("3", TypeError),
                                          (-1, ValueError)], ids=repr)
def test_set_epoch_refuses_what_is_not_an_epoch_and_the_loader_still_works(loader, epoch, error):
    # int() would have run epoch 1 for 1.5 and 3 for "3": draws of an epoch nobody asked for.
    with build(loader) as built:
        with pytest.raises(error, match="epoch") as info:
            built.set_epoch(epoch)
        assert repr(epoch) in str(info.value) or str(epoch) in str(info.value)
        built.set_epoch(2.0)  # a whole float is a whole number, as everywhere in prefetch
        assert len(list(built)) >= 1
