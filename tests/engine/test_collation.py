"""Collation: bad batches raise prefetch.CollateError (a ValueError) naming the leaf, the sample
and both shapes or dtypes, and nothing else is affected: the next epoch works."""
import numpy as np
import pytest
import torch

import prefetch


def test_ragged_samples_name_the_sample_and_both_shapes():
    bad = [prefetch.Samples([torch.zeros(3, 4), torch.zeros(3, 4), torch.zeros(3, 5)])]
    with prefetch.Prefetcher([bad], device="cpu") as pf:
        with pytest.raises(prefetch.CollateError) as info:
            list(pf)
        msg = str(info.value)
        assert "sample 2" in msg and "[3, 5]" in msg and "[3, 4]" in msg and "batch[0]" in msg


def test_mixed_dtypes_name_the_sample_and_both_dtypes():
    bad = {"x": prefetch.Samples([torch.zeros(2), torch.zeros(2, dtype=torch.float64)])}
    with prefetch.Prefetcher([bad], device="cpu") as pf:
        with pytest.raises(prefetch.CollateError) as info:
            list(pf)
    msg = str(info.value)
    assert "sample 1" in msg and "torch.float64" in msg and "torch.float32" in msg
    assert "batch['x']" in msg


@pytest.mark.parametrize("bad,match", [
    (prefetch.Samples([]), "empty Samples"),
    (prefetch.Samples([torch.zeros(2), np.zeros(2)]), "sample 1 is a ndarray"),
    (prefetch.Samples(["a", "b"]), "sample 0 is a str"),
    (np.array([object(), 1]), "dtype object"),
    (torch.zeros(3).to_sparse(), "layout"),
])
def test_bad_leaves_raise_clear_errors_and_the_next_epoch_works(bad, match):
    class Source:
        def __init__(self):
            self.first = True

        def __iter__(self):
            yield torch.ones(3)
            if self.first:
                self.first = False
                yield [bad]
            yield torch.full((3,), 2.0)

    with prefetch.Prefetcher(Source(), device="cpu") as pf:
        it = iter(pf)
        assert torch.equal(next(it), torch.ones(3))
        with pytest.raises(prefetch.CollateError, match=match):
            next(it)
        assert [b.tolist() for b in pf] == [[1.0] * 3, [2.0] * 3]


def test_a_batch_over_the_memory_cap_is_refused():
    batches = [torch.zeros(100, dtype=torch.uint8), torch.zeros(10_000, dtype=torch.uint8)]
    with prefetch.Prefetcher(batches, device="cpu", max_batch_bytes=4096) as pf:
        it = iter(pf)
        next(it)
        with pytest.raises(prefetch.CollateError, match="max_batch_bytes=4096"):
            next(it)
