"""Ray Data as a source: every sample of a dataset arrives once per epoch, intact, whether the
Prefetcher is given the dataset or a RaySource; what RaySource cannot read is refused. Columns
beyond plain numeric arrays: strings and paths pass through as lists of str, other objects pass
through or stack, ragged and timestamp columns fail naming the column and the fix. References are
independent: the items a dataset was built from, PIL's decoding of the files, the float64
reference of the transform. Ray is an optional extra: these tests skip without it (CI installs
it)."""
import numpy as np
import pytest
import torch

import prefetch

from ..conftest import SANITIZED
from ..reference import reference

MEAN, STD = [0.5, 0.45, 0.4], [0.22, 0.25, 0.2]

# Ray, Lightning and torchrun start other processes and threads of their own; under the
# sanitized extension (scripts/sanitize.sh python) they are left to the regular run, as .ci/run
# leaves tests/integrations.
multiprocess = pytest.mark.skipif(SANITIZED, reason="Ray/Lightning/torchrun: regular run only")


def _expected_image(i, size=6):
    """The image the Ray preprocessing makes for sample i (recomputed here, independently)."""
    base = (torch.arange(size * size * 3, dtype=torch.int64) * 7 + i * 31) % 256
    return base.to(torch.uint8).view(size, size, 3)


@pytest.fixture(scope="module")
def ray_runtime():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=150 * 2**20,
             log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def test_ray_dataset_every_sample_arrives_once_intact(ray_runtime):
    import numpy as np

    ray = ray_runtime
    n, size = 300, 6

    def preprocess(batch):  # runs in Ray workers: the "decoding" scaled out over the cluster
        ids = batch["id"]
        flat = (np.arange(size * size * 3, dtype=np.int64)[None, :] * 7 + ids[:, None] * 31) % 256
        return {"image": flat.astype(np.uint8).reshape(-1, size, size, 3), "id": ids}

    ds = ray.data.range(n, override_num_blocks=6).map_batches(preprocess)
    for source, batch_size in ((ds, 256), (prefetch.ray.RaySource(ds, batch_size=32), 32)):
        seen = []
        with prefetch.Prefetcher(source, depth=2) as pf:
            for epoch in range(2):
                ids_this_epoch = []
                for batch in pf:
                    assert set(batch) == {"image", "id"}
                    assert batch["image"].dtype == torch.uint8 and batch["image"].shape[1:] == (size, size, 3)
                    assert batch["image"].shape[0] <= batch_size
                    for img, i in zip(batch["image"], batch["id"].tolist()):
                        assert torch.equal(img, _expected_image(i, size)), i
                    ids_this_epoch.extend(batch["id"].tolist())
                assert sorted(ids_this_epoch) == list(range(n))  # every sample once per epoch
                seen.append(ids_this_epoch)


def test_ray_source_refuses_what_it_cannot_read(ray_runtime):
    ds = ray_runtime.data.range(10)
    with pytest.raises(TypeError, match="needs a Ray Dataset"):
        prefetch.ray.RaySource([1, 2, 3])
    with pytest.raises(ValueError, match="batch_format='pandas' is not supported"):
        prefetch.ray.RaySource(ds, batch_format="pandas")
    with pytest.raises(KeyError, match=r"no column\(s\) \['image'\]; it has \['id'\]"):
        list(prefetch.Prefetcher(prefetch.ray.RaySource(ds, columns=["image"])))


# ---- columns beyond plain numeric arrays ------------------------------------------------------


def _image(i, h=5, w=6):
    flat = (np.arange(h * w * 3, dtype=np.int64) * 3 + i * 17) % 256
    return flat.astype(np.uint8).reshape(h, w, 3)


def _epoch_rows(pf, key="id"):
    """Every delivered row of one epoch, keyed by `key`, with the batch it came in."""
    rows = {}
    for batch in pf:
        for r, k in enumerate(batch[key].tolist()):
            assert k not in rows, k
            rows[k] = (batch, r)
    return rows


@multiprocess
def test_ray_string_column_passes_through_as_a_list_of_str(ray_runtime):
    items = [{"id": i, "name": "sample-%02d" % i, "image": _image(i)} for i in range(11)]
    ds = ray_runtime.data.from_items(items)
    # What Ray itself gives: an object ndarray of str (refused by the tree before the fix).
    plain = next(iter(ds.iter_batches(batch_size=4, batch_format="numpy")))
    assert isinstance(plain["name"], np.ndarray) and plain["name"].dtype == object
    for source in (ds, prefetch.ray.RaySource(ds, batch_size=4)):
        with prefetch.Prefetcher(source, device="cpu", depth=2) as pf:
            for _ in range(2):  # two epochs: the second works as the first
                rows = _epoch_rows(pf)
                assert sorted(rows) == list(range(11))
                for i, (batch, r) in rows.items():
                    assert type(batch["name"]) is list and len(batch["name"]) == len(batch["id"])
                    assert type(batch["name"][r]) is str and batch["name"][r] == items[i]["name"]
                    assert batch["image"].dtype == torch.uint8
                    assert torch.equal(batch["image"][r], torch.from_numpy(items[i]["image"]))


def _write_images(folder, sizes, formats=("png",)):
    from PIL import Image

    folder.mkdir()
    paths = []
    for i, (h, w) in enumerate(sizes):
        path = folder / ("img%d.%s" % (i, formats[i % len(formats)]))
        Image.fromarray(_image(i, h, w)).save(str(path))
        paths.append(str(path))
    return paths


def _decoded(path):
    from PIL import Image

    with Image.open(path) as img:
        return torch.from_numpy(np.asarray(img.convert("RGB")).copy())


@multiprocess
def test_ray_read_images_with_paths_delivers_images_and_path_strings(ray_runtime, tmp_path):
    pytest.importorskip("PIL")
    paths = _write_images(tmp_path / "imgs", [(10, 10)] * 5, formats=("png", "jpg"))
    ds = ray_runtime.data.read_images(str(tmp_path / "imgs"), include_paths=True)
    aug = prefetch.FusedAugment(MEAN, STD, crop=8, center_crop=True, hflip=0.0, image_key="image")
    seen = []
    with prefetch.Prefetcher(prefetch.ray.RaySource(ds, batch_size=2), device="cpu",
                             transform=aug) as pf:
        for batch in pf:
            assert set(batch) == {"image", "path"} and type(batch["path"]) is list
            assert len(batch["path"]) == batch["image"].shape[0]
            for x, path in zip(batch["image"], batch["path"]):
                assert type(path) is str and path.endswith(tuple(p[-9:] for p in paths))
                ref = reference(_decoded(path.split("://")[-1])[None], MEAN, STD, crop=(8, 8))
                assert torch.allclose(x[None].double(), ref, atol=1e-5), path
                seen.append(path.rsplit("/", 1)[-1])
    assert sorted(seen) == sorted(p.rsplit("/", 1)[-1] for p in paths)


@multiprocess
def test_ray_ragged_images_fail_naming_the_column_and_the_fix(ray_runtime, tmp_path):
    pytest.importorskip("PIL")
    _write_images(tmp_path / "ragged", [(10, 10), (12, 10), (10, 14), (10, 10)])
    ds = ray_runtime.data.read_images(str(tmp_path / "ragged"), include_paths=True)
    with prefetch.Prefetcher(prefetch.ray.RaySource(ds, batch_size=4), device="cpu") as pf:
        for _ in range(2):  # the failure repeats cleanly; the Prefetcher is not broken by it
            with pytest.raises(ValueError) as info:
                list(pf)
            message = str(info.value)
            assert "'image'" in message and "different shapes" in message, message
            assert "map_batches" in message and "columns=" in message, message
            assert "(10, 10, 3)" in message and "img" in message, message  # the shapes, a path
    # The fix the message names: leave the column out (or resize it) and the rest arrives.
    with prefetch.Prefetcher(prefetch.ray.RaySource(ds, columns=["path"]), device="cpu") as pf:
        assert sorted(p.rsplit("/", 1)[-1] for b in pf for p in b["path"]) == [
            "img%d.png" % i for i in range(4)]
    # ... or resize in map_batches, as the message says.
    def resize(batch):
        batch["image"] = np.stack([img[:8, :8] for img in batch["image"]])
        return batch

    with prefetch.Prefetcher(ds.map_batches(resize), device="cpu") as pf:
        assert sum(b["image"].shape[0] for b in pf) == 4


@multiprocess
def test_ray_object_columns_pass_through_or_stack_or_fail_clearly(ray_runtime):
    n = 6
    items = [{"id": i, "meta": {"k": i, "tag": "t%d" % i}, "maybe": ("s%d" % i) if i % 2 else None,
              "raw": b"bytes%d" % i, "pair": [i, 2 * i]} for i in range(n)]
    ds = ray_runtime.data.from_items(items)
    with prefetch.Prefetcher(prefetch.ray.RaySource(ds, batch_size=4), device="cpu") as pf:
        rows = _epoch_rows(pf)
    assert sorted(rows) == list(range(n))
    for i, (batch, r) in rows.items():
        # Non-array objects pass through as lists (as strings and None do in any batch).
        assert type(batch["meta"]) is list and batch["meta"][r] == items[i]["meta"]
        assert type(batch["maybe"]) is list and batch["maybe"][r] == items[i]["maybe"]
        assert type(batch["raw"]) is list and batch["raw"][r] == items[i]["raw"]
        # A list column of equal lengths (an object array of same-shape arrays) is one tensor.
        assert isinstance(batch["pair"], torch.Tensor) and batch["pair"].shape[1:] == (2,)
        assert batch["pair"][r].tolist() == items[i]["pair"]
    # Ragged list columns fail as ragged images do, naming the column.
    ragged = ray_runtime.data.from_items([{"id": i, "tokens": list(range(i + 1))}
                                          for i in range(4)])
    with pytest.raises(ValueError, match=r"'tokens'.*different shapes.*\(1,\).*\(2,\)"):
        list(prefetch.Prefetcher(ragged, device="cpu"))
    # Lists of strings (Ray: object arrays of object arrays of str), of any lengths, or None, pass
    # through as lists of lists of str; nested lists of numbers are stacked.
    items = [{"id": i, "tags": ["t"] * (i % 3 + 1), "pairs": ["a%d" % i, "b"],
              "opt": None if i % 2 else ["x%d" % i], "grid": [[i, 1], [2, 3]]} for i in range(n)]
    with prefetch.Prefetcher(ray_runtime.data.from_items(items), device="cpu") as pf:
        rows = _epoch_rows(pf)
    assert sorted(rows) == list(range(n))
    for i, (batch, r) in rows.items():
        for key in ("tags", "pairs", "opt"):
            assert type(batch[key]) is list and batch[key][r] == items[i][key], (key, i)
        assert batch["grid"].shape[1:] == (2, 2) and batch["grid"][r].tolist() == items[i]["grid"]
    # A timestamp column (Ray: datetime64) has no tensor dtype: a clear error naming it and a fix.
    import datetime

    dated = ray_runtime.data.from_items([{"id": i, "when": datetime.datetime(2020, 1, 1 + i)}
                                         for i in range(3)])
    with pytest.raises(ValueError, match=r"'when'.*datetime64.*astype\(np.int64\).*columns="):
        list(prefetch.Prefetcher(dated, device="cpu"))


@multiprocess
def test_ray_numpy_string_columns_from_map_batches(ray_runtime):
    """A `<U`/`S` column a map_batches function returns (Ray may keep or convert it) and a 2-D
    string column arrive as (nested) lists of str/bytes, row for row."""

    def add_strings(batch):
        ids = batch["id"]
        batch["label"] = np.array(["class-%d" % (i % 3) for i in ids])  # dtype <U
        batch["code"] = np.array([b"c%d" % i for i in ids])             # dtype S
        batch["tags"] = np.array([["a%d" % i, "b%d" % i] for i in ids])  # 2-D <U
        return batch

    ds = ray_runtime.data.range(9).map_batches(add_strings)
    with prefetch.Prefetcher(ds, device="cpu") as pf:
        rows = _epoch_rows(pf)
    assert sorted(rows) == list(range(9))
    for i, (batch, r) in rows.items():
        assert type(batch["label"]) is list and batch["label"][r] == "class-%d" % (i % 3)
        assert batch["code"][r] == b"c%d" % i
        assert [str(t) for t in batch["tags"][r]] == ["a%d" % i, "b%d" % i]


def test_ray_source_converts_columns_without_ray():
    """The column conversion itself, on numpy batches built here (no Ray runtime): `<U`, `S`,
    object str, object arrays of one shape (stacked), ragged and mixed-dtype arrays (refused)."""
    from prefetch.sources.ray import _numpy_batch

    def objects(*rows):
        column = np.empty(len(rows), dtype=object)
        for i, row in enumerate(rows):
            column[i] = row
        return column

    batch = _numpy_batch({"u": np.array(["a", "bc"]), "s": np.array([b"x", b"yz"]),
                          "o": objects("p", None),
                          "arr": objects(np.zeros(3, np.int16), np.ones(3, np.int16)),
                          "n": np.arange(2)})
    assert batch["u"] == ["a", "bc"] and batch["s"] == [b"x", b"yz"] and batch["o"] == ["p", None]
    assert batch["arr"].dtype == np.int16 and batch["arr"].tolist() == [[0, 0, 0], [1, 1, 1]]
    assert batch["n"].dtype == np.arange(2).dtype
    with pytest.raises(ValueError, match=r"'m'.*different dtypes.*sample 0 is \(3,\) uint8 "
                                         r"but sample 1 is \(3,\) float32"):
        _numpy_batch({"m": objects(np.zeros(3, np.uint8), np.zeros(3, np.float32))})
    with pytest.raises(ValueError, match=r"'h'.*sample 1 is a NoneType"):
        _numpy_batch({"h": objects(np.zeros(3), None)})
    with pytest.raises(ValueError, match=r"'d'.*timedelta64"):
        _numpy_batch({"d": np.array([1, 2], dtype="timedelta64[s]")})
    # A column without rows, and a 2-D object column of str, keep their shapes.
    assert _numpy_batch({"e": np.empty(0, dtype=object)})["e"] == []
    assert _numpy_batch({"t": np.array([["a", "b"], ["c", "d"]], dtype=object)})["t"] == [
        ["a", "b"], ["c", "d"]]


# ---- resume ----------------------------------------------------------------------------------------


def _resumable_ray_loader(ray):
    from ..engine.test_resume_moments import Tag

    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # (the dataset keeps the context it was made in)
    ds = ray.data.range(20, override_num_blocks=4).random_shuffle(seed=3)
    source = prefetch.ray.RaySource(ds, batch_size=4, resumable=True)
    return prefetch.Prefetcher(source, device="cpu", depth=2,
                               transform=Tag(lambda b: tuple(b["id"].tolist())))


@multiprocess
def test_a_resumable_ray_source_resumes_at_every_moment(ray_runtime):
    """RaySource(resumable=True) under a Prefetcher: a state saved at each moment of
    tests/engine/test_resume_moments.py resumes what the uninterrupted run produces next. Ray
    Data has no len(): after the last batch but before the end, the position stays in the epoch
    (the resumed run's first iter() yields its empty rest), as for any source without len()."""
    from ..engine.test_resume_moments import MOMENTS, after_last_batch, break_at_last_batch

    ray = ray_runtime
    with _resumable_ray_loader(ray) as loader:
        full = [list(loader) for _ in range(3)]
    n = len(full[0])
    assert n == 5 and [[t[1:] for t in e] for e in full] == [[(e, i) for i in range(5)]
                                                              for e in range(3)]
    assert sorted(i for t in full[0] for i in t[0]) == list(range(20))
    for moment in MOMENTS:
        first = _resumable_ray_loader(ray)
        saves = moment(first, n)
        first.close()
        for label, state, (epoch, consumed) in saves:
            if moment in (after_last_batch, break_at_last_batch):
                epoch, consumed = 0, n
            assert (state["epoch"], state["batches_consumed"]) == (epoch, consumed), moment
            with _resumable_ray_loader(ray) as resumed:
                resumed.load_state_dict(state)
                got = [list(resumed) for _ in range(3 - epoch)]
            assert got == [full[epoch][consumed:]] + full[epoch + 1:], (moment.__name__, label)


@multiprocess
def test_a_ray_source_is_resumable_only_when_its_order_can_be_replayed(ray_runtime):
    ray = ray_runtime
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = False
    unordered = ray.data.range(8)
    plain = prefetch.ray.RaySource(unordered, batch_size=4)
    assert not hasattr(plain, "state_dict")
    with prefetch.Prefetcher(unordered, device="cpu") as pf:
        assert not hasattr(pf, "state_dict")  # nothing to save, so nothing Lightning would call
    with pytest.raises(ValueError, match="preserve_order = True"):
        prefetch.ray.RaySource(unordered, batch_size=4, resumable=True)
    ctx.execution_options.preserve_order = True
    ordered = ray.data.range(8)
    with pytest.raises(ValueError, match="needs local_shuffle_seed"):
        prefetch.ray.RaySource(ordered, batch_size=4, resumable=True, local_shuffle_buffer_size=4)
    with pytest.raises(ValueError, match="DataIterator"):
        prefetch.ray.RaySource(ordered.iterator(), batch_size=4, resumable=True)
    ctx.execution_options.preserve_order = False
