"""The CPU ops' output pool: pooled outputs hold the reference values, a live output is never
handed out again, and output_pool_stats / release_output_pool / set_output_pool_limit report and
bound what the pool holds.

The pool is one per process, so other tests may have left buffers in it: every check here is on
differences of the stats, after a fixture that empties the pool and restores its bound."""
import gc
import threading

import pytest
import torch

from prefetch.ops import (flip_crop, normalize_flip, output_pool_stats, release_output_pool,
                          set_output_pool_limit)

from ..reference import reference, reference_geometry
from .test_augment import MEAN, STD, assert_matches

MIB = 2**20
# fp32 [6, 3, 128, 128] is 1.125 MiB: above the pool's 1 MiB threshold, small enough for the
# float64 reference's per-pixel loop.
N, H, W, C = 6, 128, 128, 3
OUT_BYTES = N * C * H * W * 4


@pytest.fixture(autouse=True)
def empty_pool():
    gc.collect()  # outputs of earlier tests that only a cycle kept alive return now
    limit = output_pool_stats()["max_idle_bytes"]
    release_output_pool()
    yield
    set_output_pool_limit(limit)
    release_output_pool()


@pytest.fixture(scope="module")
def case():
    """Three input batches with flips and windows partly outside the image (fill), and their
    float64 references: two float32-sized ones, and one with a window twice as wide, so that its
    bfloat16 output (1.125 MiB) is pooled too."""
    g = torch.Generator().manual_seed(14)
    batches = []
    for crop in ((H, W), (H, W), (H, 2 * W)):
        images = torch.randint(0, 256, (N, H, W, C), dtype=torch.uint8, generator=g)
        kwargs = dict(hflip=torch.rand(N, generator=g) < 0.5, vflip=torch.rand(N, generator=g) < 0.5,
                      crop=crop, offsets=torch.randint(-20, 21, (N, 2), generator=g), fill=7)
        batches.append((images, kwargs, reference(images, MEAN[:C], STD[:C], **kwargs)))
    return batches


def run(batch, **extra):
    images, kwargs, _ = batch
    return normalize_flip(images, MEAN[:C], STD[:C], **kwargs, **extra)


def delta(before, after):
    return {k: after[k] - before[k] for k in before}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_a_pooled_output_holds_the_reference_values(case, dtype, channels_last):
    batch = case[0] if dtype == torch.float32 else case[2]
    before = output_pool_stats()
    out = run(batch, dtype=dtype, channels_last=channels_last)
    d = delta(before, output_pool_stats())
    assert out.nbytes >= MIB
    assert d["allocations"] + d["reuses"] == 1
    assert d["in_use_buffers"] == 1 and d["in_use_bytes"] == out.nbytes
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    assert out.is_contiguous(memory_format=fmt) and out.dtype == dtype
    assert_matches(out, batch[2], dtype)


def test_a_reused_buffer_is_overwritten_everywhere(case):
    first = run(case[0])
    first.fill_(float("nan"))  # whatever a reuse does not write stays NaN
    del first
    before = output_pool_stats()
    second = run(case[1])
    d = delta(before, output_pool_stats())
    assert d["reuses"] == 1 and d["allocations"] == 0
    assert_matches(second, case[1][2], torch.float32)


def test_a_live_output_is_not_handed_out_again(case):
    first = run(case[0])
    first_ptr = first.data_ptr()
    view = first[1:]  # a view keeps the buffer alive as the tensor does
    del first
    kept = view.clone()
    before = output_pool_stats()
    second = run(case[1])
    assert second.data_ptr() != first_ptr
    assert delta(before, output_pool_stats())["allocations"] == 1
    assert torch.equal(view, kept)
    assert_matches(second, case[1][2], torch.float32)
    in_use = output_pool_stats()["in_use_buffers"]
    del view
    assert output_pool_stats()["in_use_buffers"] == in_use - 1


def test_steady_state_reuses_and_idle_is_bounded_by_count(case):
    for _ in range(2):  # warm: the pool holds what two live outputs need
        out = run(case[0])
        out = run(case[0])
    del out
    before = output_pool_stats()
    out = None
    for _ in range(10):
        out = run(case[0])  # the previous output is alive during the call
    d = delta(before, output_pool_stats())
    assert d["allocations"] == 0 and d["reuses"] == 10
    del out
    live = [run(case[0]) for _ in range(4)]
    del live
    stats = output_pool_stats()
    assert stats["max_idle_buffers"] == 2
    assert stats["idle_buffers"] == 2 and stats["idle_bytes"] == 2 * OUT_BYTES


def test_release_output_pool_frees_idle_buffers_only(case):
    a, b = run(case[0]), run(case[0])
    del a
    stats = output_pool_stats()
    assert stats["idle_buffers"] == 1 and stats["idle_bytes"] == OUT_BYTES
    assert release_output_pool() == OUT_BYTES
    stats = output_pool_stats()
    assert stats["idle_buffers"] == 0 and stats["idle_bytes"] == 0
    assert_matches(b, case[0][2], torch.float32)  # the live output is untouched
    del b
    assert output_pool_stats()["idle_bytes"] == OUT_BYTES  # and still comes back
    assert release_output_pool() == OUT_BYTES
    assert release_output_pool() == 0


def test_the_byte_bound_holds_and_is_reported(case):
    previous = set_output_pool_limit(OUT_BYTES + 4096)  # room for one output, not two
    assert previous == 512 * MIB
    assert output_pool_stats()["max_idle_bytes"] == OUT_BYTES + 4096
    a, b = run(case[0]), run(case[0])
    del a, b
    stats = output_pool_stats()
    assert stats["idle_buffers"] == 1 and stats["idle_bytes"] == OUT_BYTES
    # Lowering the bound frees at once.
    assert set_output_pool_limit(MIB) == OUT_BYTES + 4096
    assert output_pool_stats()["idle_bytes"] == 0


def test_an_output_larger_than_the_bound_comes_from_torch(case):
    set_output_pool_limit(OUT_BYTES - 1)
    before = output_pool_stats()
    out = run(case[0])
    d = delta(before, output_pool_stats())
    assert d["allocations"] == d["reuses"] == d["in_use_buffers"] == 0
    assert_matches(out, case[0][2], torch.float32)


def test_limit_zero_turns_the_pool_off(case):
    run(case[0])
    assert output_pool_stats()["idle_bytes"] == OUT_BYTES
    set_output_pool_limit(0)
    assert output_pool_stats()["idle_bytes"] == 0
    before = output_pool_stats()
    outs = [run(case[i % 2]) for i in range(3)]
    assert output_pool_stats() == before
    for i, out in enumerate(outs):
        assert_matches(out, case[i % 2][2], torch.float32)


def test_bad_limits_are_refused():
    with pytest.raises(RuntimeError, match="max_idle_bytes must be >= 0, got -1"):
        set_output_pool_limit(-1)
    with pytest.raises(TypeError, match="max_idle_bytes must be a whole number"):
        set_output_pool_limit(0.5)


def test_small_outputs_are_not_pooled(case):
    images, kwargs, ref = case[0]
    before = output_pool_stats()
    out = normalize_flip(images[:1], MEAN[:C], STD[:C], hflip=kwargs["hflip"][:1],
                         vflip=kwargs["vflip"][:1], crop=(H, W), offsets=kwargs["offsets"][:1],
                         fill=7)
    assert output_pool_stats() == before
    assert_matches(out, ref[:1], torch.float32)


def test_masks_come_from_the_pool_too():
    g = torch.Generator().manual_seed(6)
    masks = torch.randint(-5, 5, (4, 64, 64), dtype=torch.int64, generator=g)  # 128 KiB
    masks = masks.repeat(1, 1, 9)  # [4, 64, 576] int64: 1.125 MiB
    hflip = torch.tensor([True, False, True, False])
    offsets = torch.randint(-10, 11, (4, 2), generator=g)
    before = output_pool_stats()
    out = flip_crop(masks, hflip=hflip, crop=(64, 576), offsets=offsets, fill=-3)
    d = delta(before, output_pool_stats())
    assert d["in_use_buffers"] == 1 and d["in_use_bytes"] == out.numel() * 8
    expected = reference_geometry(masks[:, None], hflip, None, (64, 576), offsets, -3)[:, 0]
    assert out.dtype == torch.int64 and torch.equal(out, expected.long())


def test_concurrent_calls_and_controls(case):
    """Threads call the op, keeping each output for one step, while another thread reads the
    stats, empties the pool and moves its bound: every output holds its own values."""
    in_use = output_pool_stats()["in_use_buffers"]
    case = case[:2]
    expected = [run(b) for b in case]
    for e, b in zip(expected, case):
        assert_matches(e, b[2], torch.float32)
    errors, stop = [], threading.Event()

    def user(k):
        try:
            prev = None
            for i in range(15):
                j = (k + i) % 2
                out = run(case[j])
                if not torch.equal(out, expected[j]):
                    errors.append("thread %d call %d: wrong values" % (k, i))
                if prev is not None and not torch.equal(prev[0], expected[prev[1]]):
                    errors.append("thread %d call %d: a kept output changed" % (k, i))
                prev = (out, j)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    def controller():
        k = 0
        while not stop.is_set():
            s = output_pool_stats()
            if s["idle_bytes"] > s["max_idle_bytes"] or s["idle_buffers"] > s["max_idle_buffers"]:
                errors.append("bounds broken: %s" % s)
            k += 1
            if k % 3 == 0:
                release_output_pool()
            set_output_pool_limit(OUT_BYTES if k % 2 else 512 * MIB)

    threads = [threading.Thread(target=user, args=(k,)) for k in range(3)]
    ctl = threading.Thread(target=controller)
    ctl.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    ctl.join()
    assert errors == []
    del expected, e  # e: the last expected output, from the check loop above
    gc.collect()
    assert output_pool_stats()["in_use_buffers"] == in_use
