"""MultiView: several views of each image, each a v2 Compose with its own draws (issue 47). Each
view equals its single-view Compose compiled with the view's seed and applied to the same batch;
the view seeds are splitmix64 of (seed, view) (written out here from the paper's constants) and
never the seed of another view's member; the recipes are the papers' (their numbers written out
here); the decode host stage of every view, through a loader, gives the CPU path's views."""
import io

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import prefetch
from prefetch.transforms import BatchPosition
from prefetch.transforms import ssl, v2 as T
from prefetch.transforms.multi_view import union_boxes, view_seeds
from prefetch.transforms.v2_plan import seeds as member_seeds

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
AT = BatchPosition(3, 7, 1)


def images(n=6, seed=0, h=40, w=52):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, h, w, 3), dtype=torch.uint8, generator=g)


def global_steps():
    return [T.RandomResizedCrop(24, scale=(0.4, 1.0), interpolation="bicubic"),
            T.RandomHorizontalFlip(),
            T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8), T.RandomGrayscale(0.2),
            T.GaussianBlur(5, (0.1, 2.0)),
            T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)]


def local_steps():
    return [T.RandomResizedCrop(12, scale=(0.05, 0.4)), T.RandomHorizontalFlip(),
            T.RandomSolarize(128, p=0.5), T.ToDtype(torch.bfloat16, scale=True),
            T.Normalize(MEAN, STD)]


def splitmix64(x):
    """splitmix64's output function (Steele, Lea, Flood, OOPSLA 2014), on a 64-bit word."""
    m = (1 << 64) - 1
    z = x & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def test_each_view_is_its_compose_with_the_views_seed():
    mv = T.MultiView([T.Compose(global_steps()), T.Compose(global_steps()),
                      T.Compose(local_steps())], seed=42)
    x, labels = images(), torch.arange(6)
    out_images, out_labels = mv.apply((x, labels), AT)
    assert torch.equal(out_labels, labels)
    assert [tuple(t.shape) for t in out_images] == [(6, 3, 24, 24)] * 2 + [(6, 3, 12, 12)]
    assert [t.dtype for t in out_images] == [torch.float32] * 2 + [torch.bfloat16]
    steps = [global_steps, global_steps, local_steps]
    for k, (make, got) in enumerate(zip(steps, out_images)):
        alone = T.Compose(make(), seed=splitmix64(42 + (k + 1) * 0xD1B54A32D192ED03) % (1 << 63))
        assert torch.equal(alone.apply((x, labels), AT)[0], got), k
    # The two global views have the same recipe and their own draws.
    assert not torch.equal(out_images[0], out_images[1])
    # The input batch is untouched (every view reads the same uint8 images).
    assert torch.equal(x, images())


def test_the_view_seeds_are_splitmix64_and_no_member_of_one_view_shares_anothers_seed():
    for seed in (0, 1, 12345, -7, (1 << 64) - 1):
        got = view_seeds(seed, 10)
        assert got == [splitmix64(seed + (k + 1) * 0xD1B54A32D192ED03) % (1 << 63) for k in range(10)]
        members = [s for v in got for s in member_seeds(v, 8)]  # each view's compiled transforms
        assert len(set(members)) == len(members)
    assert view_seeds(None, 3) == [None, None, None]


def test_views_in_a_dict_batch_and_draws_follow_the_position():
    mv = T.MultiView([T.Compose(local_steps(), image_key="image"),
                      T.Compose(local_steps(), image_key="image")], seed=3)
    batch = {"image": images(), "label": torch.arange(6), "path": ["a"] * 6}
    out = mv.apply(batch, AT)
    assert set(out) == {"image", "label", "path"} and out["path"] == batch["path"]
    again = mv.apply(batch, AT)
    later = mv.apply(batch, BatchPosition(3, 8, 1))
    for a, b, c in zip(out["image"], again["image"], later["image"]):
        assert torch.equal(a, b) and not torch.equal(a, c)


def test_through_a_prefetcher_reproducible_and_resumable_from_its_state():
    batches = [(images(seed=k), torch.arange(6)) for k in range(3)]

    def run(mv):
        with prefetch.Prefetcher(batches, device="cpu", transform=mv) as p:
            return [[v.clone() for v in x] for x, _ in p]

    a = run(T.MultiView([T.Compose(global_steps()), T.Compose(local_steps())], seed=9))
    b = run(T.MultiView([T.Compose(global_steps()), T.Compose(local_steps())], seed=9))
    assert all(torch.equal(u, v) for x, y in zip(a, b) for u, v in zip(x, y))
    # seed=None: each view keeps its own drawn seeds, which the state carries to a new MultiView.
    drawn = T.MultiView([T.Compose(global_steps()), T.Compose(local_steps())])
    restored = T.MultiView([T.Compose(global_steps()), T.Compose(local_steps())])
    restored.load_state_dict(drawn.state_dict())
    c, d = run(drawn), run(restored)
    assert all(torch.equal(u, v) for x, y in zip(c, d) for u, v in zip(x, y))
    with pytest.raises(ValueError, match="holds 1 views' states; this MultiView has 2"):
        restored.load_state_dict({"views": [None]})


def test_a_failing_view_is_named():
    # (a blur wider than the 12-pixel window: refused when it runs)
    mv = T.MultiView([T.Compose(local_steps()), T.Compose([T.RandomResizedCrop(12), T.GaussianBlur(31),
                                                           T.ToDtype(torch.float32, scale=True)])])
    with pytest.raises(Exception) as info:
        mv.apply((images(), torch.arange(6)), AT)
    assert "in MultiView view 1" in "".join(getattr(info.value, "__notes__", [])), info.value


@pytest.mark.parametrize("views, error, match", [
    (lambda: [T.Compose(local_steps())], ValueError, "two or more views"),
    (lambda: T.Compose(local_steps()), TypeError, "a list of prefetch.transforms.v2.Compose"),
    (lambda: [T.Compose(local_steps()), prefetch.transforms.Compose([lambda b: b])], TypeError,
     r"view 1 is a Compose, not a prefetch.transforms.v2.Compose"),
    (lambda: [T.Compose(local_steps()), T.Compose(local_steps() + [T.MixUp(num_classes=3)])],
     ValueError, r"view 1 has MixUp: a view changes the images only"),
    (lambda: [T.Compose(local_steps()), T.Compose(local_steps(), image_key="x")], ValueError,
     "read different image leaves"),
    (lambda: [T.Compose([T.RandomResizedCrop(8), T.ToDtype(torch.float32, scale=True)],
                        decode=True), T.Compose(local_steps())], ValueError,
     r"views \[0\] decode JPEGs \(decode=True\) and the others take pixels"),
    (lambda: [T.Compose(local_steps(), seed=5), T.Compose(local_steps(), seed=5)], ValueError,
     r"view 1 draws with the seeds of an earlier view \(both built with seed=5\)"),
])
def test_bad_views_are_refused_naming_them(views, error, match):
    with pytest.raises(error, match=match):
        T.MultiView(views())


def test_a_view_given_twice_draws_its_own_images():
    # [view] * 2 without a seed: the second is compiled again with fresh seeds (else both views
    # of every image would be the same image, and a contrastive loss trivial).
    view = T.Compose(local_steps())
    x = images()
    for mv in (T.MultiView([view, view]), T.MultiView([T.Compose(local_steps())] * 3)):
        out = mv.apply((x, torch.arange(6)), AT)[0]
        assert all(not torch.equal(out[i], out[j]) for i in range(len(out)) for j in range(i))
    assert T.MultiView([view, view]).views[0] is view  # the first kept as it is


def test_a_bad_seed_is_refused():
    with pytest.raises(TypeError, match="MultiView seed"):
        T.MultiView([T.Compose(local_steps()), T.Compose(local_steps())], seed=1.5)


# --- the recipes, against the papers' numbers -----------------------------------------------

def described(view):
    """A view's steps as (name, the arguments that define it), RandomApply unwrapped to
    (name, p)."""
    out = []
    for s in view.steps:
        name = type(s).__name__
        if name == "RandomApply":
            inner = s.transforms[0]
            out.append(("RandomApply(%s)" % type(inner).__name__, s.p))
        elif name == "RandomResizedCrop":
            size = tuple(s.size) if isinstance(s.size, (tuple, list)) else (s.size, s.size)
            out.append((name, size, tuple(s.scale), s.interpolation))
        elif name == "GaussianBlur":
            out.append((name, tuple(s.kernel_size), tuple(s.sigma)))
        elif name in ("RandomSolarize", "RandomGrayscale", "RandomHorizontalFlip"):
            out.append((name, s.p))
        elif name == "Normalize":
            out.append((name, tuple(s.mean), tuple(s.std)))
        else:
            out.append((name,))
    return out


def jitter(view):
    apply = next(s for s in view.steps if type(s).__name__ == "RandomApply"
                 and type(s.transforms[0]).__name__ == "ColorJitter")
    c = apply.transforms[0]
    return tuple(getattr(c, k) for k in ("brightness", "contrast", "saturation", "hue"))


def test_dino_views_are_dinos_data_augmentation():
    mv = ssl.dino_views(seed=0)
    assert len(mv) == 10
    norm = ("Normalize", MEAN, STD)
    common = [("RandomHorizontalFlip", 0.5), ("RandomApply(ColorJitter)", 0.8),
              ("RandomGrayscale", 0.2)]
    g1 = [("RandomResizedCrop", (224, 224), (0.4, 1.0), "bicubic")] + common + [
        ("GaussianBlur", (23, 23), (0.1, 2.0)), ("ToDtype",), norm]
    g2 = [("RandomResizedCrop", (224, 224), (0.4, 1.0), "bicubic")] + common + [
        ("RandomApply(GaussianBlur)", 0.1), ("RandomSolarize", 0.2), ("ToDtype",), norm]
    local = [("RandomResizedCrop", (96, 96), (0.05, 0.4), "bicubic")] + common + [
        ("RandomApply(GaussianBlur)", 0.5), ("ToDtype",), norm]
    assert described(mv.views[0]) == g1 and described(mv.views[1]) == g2
    assert all(described(v) == local for v in mv.views[2:])
    # RandomResizedCrop's default ratio, solarize's threshold 128 (PIL's ImageOps.solarize)
    assert all(tuple(v.steps[0].ratio) == (3 / 4, 4 / 3) for v in mv.views)
    assert mv.views[1].steps[5].threshold == 128
    assert all(jitter(v) == (0.4, 0.4, 0.2, 0.1) for v in mv.views)
    assert len(ssl.dino_views(local_crops_number=0)) == 2


def test_byol_views_are_asymmetric_as_in_the_paper():
    a, b = ssl.byol_views().views
    assert ("GaussianBlur", (23, 23), (0.1, 2.0)) in described(a)
    assert not any(d[0] == "RandomSolarize" for d in described(a))
    assert ("RandomApply(GaussianBlur)", 0.1) in described(b) and ("RandomSolarize", 0.2) in described(b)
    assert described(a)[0] == described(b)[0] == ("RandomResizedCrop", (224, 224), (0.08, 1.0), "bicubic")


def test_simclr_and_swav_views():
    a, b = ssl.simclr_views(224).views
    assert described(a) == described(b)
    assert ("RandomApply(GaussianBlur)", 0.5) in described(a)
    assert a.steps[4].transforms[0].kernel_size == (23, 23)  # 10% of 224, odd
    assert ssl.simclr_views(96).views[0].steps[4].transforms[0].kernel_size == (9, 9)
    assert jitter(a) == (0.8, 0.8, 0.8, 0.2)
    assert jitter(ssl.simclr_views(32, strength=0.5).views[0]) == (0.4, 0.4, 0.4, 0.1)
    assert not any("GaussianBlur" in d[0] for d in described(ssl.simclr_views(32, blur_p=0).views[0]))
    sw = ssl.swav_views()
    assert len(sw) == 8
    assert [described(v)[0] for v in sw.views] == (
        [("RandomResizedCrop", (224, 224), (0.14, 1.0), "bilinear")] * 2
        + [("RandomResizedCrop", (96, 96), (0.05, 0.14), "bilinear")] * 6)
    assert all(described(v)[-1] == ("Normalize", MEAN, (0.228, 0.224, 0.225)) for v in sw.views)
    with pytest.raises(ValueError, match="of one length"):
        ssl.swav_views(size_crops=(224,), nmb_crops=(2, 6))


def test_the_recipes_take_dict_batches():
    batch = {"img": images(n=3, h=80, w=70), "y": torch.arange(3)}
    for mv in (ssl.dino_views(32, 16, local_crops_number=1, blur_kernel=5, seed=1, image_key="img",
                              label_key="y"),
               ssl.simclr_views(16, seed=2, image_key="img", label_key="y")):
        out = mv.apply(batch, AT)
        assert len(out["img"]) == len(mv) and torch.equal(out["y"], batch["y"])


def test_the_recipes_run_on_a_batch():
    x = images(n=3, h=120, w=100)
    for mv in (ssl.dino_views(64, 32, local_crops_number=2, blur_kernel=7, seed=1),
               ssl.simclr_views(32, seed=2), ssl.byol_views(48, blur_kernel=5, seed=3),
               ssl.swav_views((40, 16), (1, 2), blur_kernel=5, seed=4)):
        views, labels = mv.apply((x, torch.arange(3)), AT)
        assert len(views) == len(mv) and all(v.shape[:2] == (3, 3) for v in views)
        assert all(torch.isfinite(v.float()).all() for v in views)


# --- decode=True: each view's host stage, through a loader ------------------------------------

def _jpegs(n):
    from PIL import Image

    rng = np.random.default_rng(5)
    out = []
    for k in range(n):
        h, w = int(rng.integers(30, 70)), int(rng.integers(30, 70))
        pixels = rng.integers(0, 256, size=(h, w, 3)).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
        out.append(torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8))
    return out


class _Files(Dataset):
    def __init__(self, files):
        self.files = files

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        return self.files[i], i


class _AsIfOnAGpu(T.MultiView):
    """A MultiView whose host stage believes its loader copies to a GPU: the views' decode host
    stages, their output collated and copied by a CPU loader's engine, then apply."""

    def host_stage_for(self, device):
        return True

    def host_apply(self, batch, position, device):
        return super().host_apply(batch, position, torch.device("cuda", 0))


@pytest.fixture
def host_jpeg_decoder(monkeypatch):
    """The host stage's decoder for a CUDA device is the CPU's (as on a GPU without torchvision's
    or torchcodec's decoder), whatever this machine has; the decoder cache cleared around it."""
    from prefetch.ops import gpu_decoders

    monkeypatch.setenv("PREFETCH_GPU_JPEG_DECODER", "cpu")
    gpu_decoders.clear_cache()
    yield
    gpu_decoders.clear_cache()


@pytest.mark.parametrize("shared", [False, True])
def test_decoding_views_in_the_host_stage_through_a_loader_equal_the_cpu_path(monkeypatch, shared,
                                                                              host_jpeg_decoder):
    """shared: the views' windows cover more than the image (shared_decode=True here), so the
    host stage decodes each image once (the union of its views' windows) for every view; else each
    view its windows."""
    pytest.importorskip("PIL")
    if not prefetch.built_with_jpeg():
        pytest.skip("built without libjpeg-turbo")
    from prefetch.transforms import multi_view

    files = _jpegs(10)

    def views():
        return [T.Compose([T.RandomResizedCrop(20, interpolation="bicubic"),
                           T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True),
                           T.Normalize(MEAN, STD)], decode=True),
                T.Compose([T.RandomResizedCrop(8, scale=(0.05, 0.4)),
                           T.ToDtype(torch.bfloat16, scale=True), T.Normalize(MEAN, STD)],
                          decode=True)]

    keys = []
    host_apply = _AsIfOnAGpu.host_apply

    def recorded(self, batch, position, device):
        out = host_apply(self, batch, position, device)
        keys.append(set(out))
        return out

    monkeypatch.setattr(_AsIfOnAGpu, "host_apply", recorded)
    results = []
    for cls in (_AsIfOnAGpu, T.MultiView):
        loader = DataLoader(_Files(files), batch_size=4, collate_fn=prefetch.collate.samples)
        with prefetch.Prefetcher(loader, device="cpu", timeout=60,
                                 transform=cls(views(), seed=6, shared_decode=shared)) as p:
            results.append([([v.clone() for v in x], y.clone()) for x, y in p])
    want = multi_view._HOST_SHARED if shared else multi_view._HOST_VIEWS
    assert keys == [{want}] * 3
    assert len(results[0]) == 3
    for (a, la), (b, lb) in zip(*results):
        assert torch.equal(la, lb)
        assert [v.shape for v in a] == [v.shape for v in b]
        assert all(torch.equal(u.float(), v.float()) for u, v in zip(a, b))


def test_the_shared_host_decode_with_a_gpu_decoder_is_one_call_a_batch_and_the_cpu_paths_output():
    """The GPU decoder's branch of the shared host decode, run on the CPU by the fake GPU decoder
    (prefetch.ops.gpu_backends.FakeGpuBackend serves the CPU device too): one batched decode a
    batch for every view, and the views equal the CPU loader's, which decodes in apply."""
    pytest.importorskip("PIL")
    if not prefetch.built_with_jpeg():
        pytest.skip("built without libjpeg-turbo")
    from prefetch.ops import gpu_decoders
    from prefetch.ops.gpu_backends import FakeGpuBackend

    files = _jpegs(10)

    def views():
        return ssl.dino_views(20, 8, local_crops_number=2, blur_kernel=5, decode=True, seed=4)

    def run(transform):
        loader = DataLoader(_Files(files), batch_size=4, collate_fn=prefetch.collate.samples)
        with prefetch.Prefetcher(loader, device="cpu", transform=transform, timeout=60) as p:
            return [([v.clone() for v in x], y.clone()) for x, y in p]

    want = run(views())
    fake = FakeGpuBackend()
    with gpu_decoders.registered(fake):
        mv = views()
        assert mv.host_stage_for("cpu")  # the fake serves the CPU device: the GPU path
        got = run(mv)
    assert fake.calls == len(want) == 3  # one decode a batch for all four views
    for (a, la), (b, lb) in zip(got, want):
        assert torch.equal(la, lb) and len(a) == len(b) == 4
        assert all(torch.equal(u, v) for u, v in zip(a, b))


def _mixed_jpegs():
    """Photo-like sizes and the forms the decoder converts: progressive, grayscale, CMYK."""
    from PIL import Image

    rng = np.random.default_rng(11)
    out = []
    for k, mode in enumerate(["RGB", "RGB", "L", "CMYK", "RGB", "RGB"]):
        h, w = int(rng.integers(40, 90)), int(rng.integers(40, 90))
        smooth = rng.integers(0, 256, size=(h // 6 + 1, w // 6 + 1, 3)).astype(np.uint8)
        img = Image.fromarray(smooth).resize((w, h), Image.BICUBIC).convert(mode)
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=85, progressive=k == 1)
        out.append(torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8))
    return out


@pytest.mark.parametrize("make", [
    lambda shared: ssl.dino_views(24, 12, local_crops_number=3, blur_kernel=5, decode=True, seed=2,
                                  shared_decode=shared),
    lambda shared: ssl.simclr_views(16, decode=True, seed=3, shared_decode=shared)])
def test_one_decode_for_every_view_gives_each_views_own_decode(make):
    pytest.importorskip("PIL")
    if not prefetch.built_with_jpeg():
        pytest.skip("built without libjpeg-turbo")
    batch = (prefetch.Ragged.from_tensors(_mixed_jpegs()), torch.arange(6))
    once, apart, auto = make(True), make(False), make(None)
    assert auto._decode_once(batch, AT)  # these recipes cover more than the images: shared
    assert once._shares_decode and not apart._shares_decode
    for at in (AT, BatchPosition(0, 1, 0)):
        a = once.apply(batch, at)[0]
        b = apart.apply(batch, at)[0]
        c = auto.apply(batch, at)[0]
        assert len(a) == len(b) == len(once)
        for u, v, w in zip(a, b, c):
            assert torch.equal(u.float(), v.float()) and torch.equal(u.float(), w.float())


def test_the_decode_is_shared_where_the_windows_are_expected_to_cover_the_images():
    # The expected coverage, written out from the recipes' scale ranges (uniform area draws).
    dino = ssl.dino_views(24, 12, blur_kernel=5, decode=True, seed=2)
    assert dino.expected_coverage() == pytest.approx(2 * 0.7 + 8 * 0.225)
    simclr = ssl.simclr_views(16, decode=True, seed=3)
    assert simclr.expected_coverage() == pytest.approx(2 * 0.54)
    small = T.MultiView([T.Compose([T.RandomResizedCrop(8, scale=(0.05, 0.4)),
                                    T.ToDtype(torch.float32, scale=True)], decode=True)] * 2, seed=1)
    assert small.expected_coverage() == pytest.approx(0.45)
    centred = T.MultiView([T.Compose([T.Resize(10), T.CenterCrop(8),
                                      T.ToDtype(torch.float32, scale=True)], decode=True)] * 2)
    assert centred.expected_coverage() == 2.0
    encoded = (prefetch.Ragged.from_tensors([torch.zeros(10, dtype=torch.uint8)]), torch.arange(1))
    assert dino._decode_once(encoded, AT) and simclr._decode_once(encoded, AT)
    assert not small._decode_once(encoded, AT)
    assert T.MultiView(small.views, shared_decode=True)._decode_once(encoded, AT)
    assert not ssl.dino_views(decode=True, shared_decode=False)._shares_decode
    assert not ssl.dino_views()._shares_decode  # no decode
    with pytest.raises(ValueError, match="MultiView shared_decode"):
        T.MultiView(small.views, shared_decode=1)


def test_views_of_small_windows_decode_apart_by_default_with_the_same_output():
    pytest.importorskip("PIL")
    if not prefetch.built_with_jpeg():
        pytest.skip("built without libjpeg-turbo")
    batch = (prefetch.Ragged.from_tensors(_mixed_jpegs()), torch.arange(6))

    def views():
        return [T.Compose([T.RandomResizedCrop(10, scale=(0.05, 0.3)), T.RandomHorizontalFlip(),
                           T.ToDtype(torch.float32, scale=True)], decode=True) for _ in range(2)]

    auto, once = T.MultiView(views(), seed=8), T.MultiView(views(), seed=8, shared_decode=True)
    assert not auto._decode_once(batch, AT)
    for u, v in zip(auto.apply(batch, AT)[0], once.apply(batch, AT)[0]):
        assert torch.equal(u, v)


def test_after_a_state_is_loaded_the_shared_decode_draws_as_the_views_do():
    pytest.importorskip("PIL")
    if not prefetch.built_with_jpeg():
        pytest.skip("built without libjpeg-turbo")
    batch = (prefetch.Ragged.from_tensors(_mixed_jpegs()), torch.arange(6))
    a = ssl.dino_views(24, 12, local_crops_number=1, blur_kernel=5, decode=True)
    b = ssl.dino_views(24, 12, local_crops_number=1, blur_kernel=5, decode=True, shared_decode=False)
    a.load_state_dict(b.state_dict())
    for u, v in zip(a.apply(batch, AT)[0], b.apply(batch, AT)[0]):
        assert torch.equal(u, v)


def _union_by_hand(tables):
    """Per image, the smallest box holding every view's window: plain Python over the rows."""
    out = []
    for rows in zip(*[t.tolist() for t in tables]):
        top, left = min(r[0] for r in rows), min(r[1] for r in rows)
        bottom, right = max(r[0] + r[2] for r in rows), max(r[1] + r[3] for r in rows)
        out.append([top, left, bottom - top, right - left])
    return out


def test_union_boxes_is_the_bounding_box_of_each_images_windows():
    g = torch.Generator().manual_seed(3)
    tables = []
    for _ in range(4):
        corner = torch.randint(0, 50, (9, 2), generator=g)
        tables.append(torch.cat([corner, torch.randint(1, 40, (9, 2), generator=g)], 1))
    assert union_boxes(tables).tolist() == _union_by_hand(tables)
    one = torch.tensor([[2, 3, 4, 5]])
    assert union_boxes([one, one]).tolist() == [[2, 3, 4, 5]]
    assert union_boxes([torch.zeros(0, 4, dtype=torch.int64)] * 2).shape == (0, 4)


@pytest.mark.parametrize("make", [
    lambda: ssl.simclr_views(16, decode=True, seed=3, shared_decode=True),
    lambda: ssl.dino_views(24, 12, local_crops_number=3, blur_kernel=5, decode=True, seed=2)])
def test_the_shared_decode_decodes_only_the_union_of_the_views_windows(monkeypatch, make,
                                                                       host_jpeg_decoder):
    """The one decode of each image covers exactly the bounding box of the windows each view
    draws alone (FusedAugment.draws_for, from the headers), on the CPU path and in the host
    stage; each view's output is still its own decode's (the test above)."""
    pytest.importorskip("PIL")
    if not prefetch.built_with_jpeg():
        pytest.skip("built without libjpeg-turbo")
    from prefetch.ops import decode as decode_module

    batch = (prefetch.Ragged.from_tensors(_mixed_jpegs()), torch.arange(6))
    mv = make()
    decoded = []
    real = decode_module.decode_jpeg

    def recording(data, boxes=None, **kw):
        decoded.append(None if boxes is None else boxes.tolist())
        return real(data, boxes, **kw)

    monkeypatch.setattr(decode_module, "decode_jpeg", recording)
    for at in (AT, BatchPosition(0, 1, 0)):
        want = _union_by_hand([v.transforms[0].draws_for(batch, at).boxes for v in mv.views])
        sizes = [s[:2] for s in decode_module.jpeg_sizes(batch[0]).tolist()]
        assert any(b[2:] != s for b, s in zip(want, sizes))  # some union is less than its image
        decoded.clear()
        views = mv.apply(batch, at)[0]
        assert decoded == [want]  # one decode a batch, of the union boxes
        decoded.clear()
        staged = mv.host_apply(batch, at, torch.device("cuda", 0))  # the host's decoder
        assert decoded == [want]
        for u, v in zip(views, mv.apply(staged, at)[0]):
            assert torch.equal(u, v)
