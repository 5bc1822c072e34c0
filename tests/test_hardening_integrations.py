"""Issue 13, items 17 and 19: Ray Data batches with string/object columns, and Lightning's
test/predict/validate stages through PrefetchDataModule. References are independent: the items a
Ray dataset was built from, PIL's decoding of the files, a plain DataLoader's batches, and the
float64 reference of the transform."""
import numpy as np
import pytest
import torch

import prefetch

from .reference import reference
from .helpers import run_child
from .conftest import SANITIZED
from .integrations.test_lightning import MEAN, STD, cpu_trainer
from .integrations.test_ray import ray_runtime  # noqa: F401 (a fixture)

# Ray, Lightning and torchrun start other processes and threads of their own; under the
# sanitized extension (scripts/sanitize.sh python) they are left to the regular run, as .ci/run
# leaves tests/test_scaling.py.
multiprocess = pytest.mark.skipif(SANITIZED, reason="Ray/Lightning/torchrun: regular run only")

# -- Ray Data: string and object columns (item 17) ------------------------------------------


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


# -- Lightning: test, predict, validate (item 19) -------------------------------------------


def _data(n=16, seed=5):
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 10, 10, 3), dtype=torch.uint8, generator=g)
    return images, torch.utils.data.TensorDataset(images, torch.arange(n))


def eval_model(pl, fail_at=None):
    """Records what each evaluation step receives: {stage: [(dataloader_idx, x, y)]}; predict_step
    returns its batch (on the CPU). `fail_at`: (stage, batch_idx) where a step raises."""

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.got = {"val": [], "test": [], "predict": []}

        def _record(self, stage, batch, batch_idx, dataloader_idx):
            if fail_at == (stage, batch_idx):
                raise RuntimeError("step failed on purpose")
            x, y = batch
            assert x.device == self.device and y.device == self.device
            self.got[stage].append((dataloader_idx, x.cpu().clone(), y.cpu().clone()))
            return (dataloader_idx, x.cpu().clone(), y.cpu().clone())

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0].float().mean().view(1, 1)).sum()

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self._record("val", batch, batch_idx, dataloader_idx)

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            self._record("test", batch, batch_idx, dataloader_idx)

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return self._record("predict", batch, batch_idx, dataloader_idx)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Model()


def _assert_transformed(got, images, batch_size, idx=0):
    assert len(got) == len(images) // batch_size
    for i, (d, x, y) in enumerate(got):
        ref = reference(images[i * batch_size:(i + 1) * batch_size], MEAN, STD, crop=(8, 8))
        assert d == idx and torch.equal(y, torch.arange(i * batch_size, (i + 1) * batch_size))
        assert x.dtype == torch.float32 and torch.allclose(x.double(), ref, atol=1e-5), i


def _assert_plain(got, loader, idx=0):
    expected = list(loader)  # plain iteration of the same loader
    assert len(got) == len(expected)
    for (d, x, y), (ex, ey) in zip(got, expected):
        assert d == idx and torch.equal(x, ex) and torch.equal(y, ey)


@multiprocess
def test_lightning_test_predict_and_validate_through_prefetchers():
    pl = pytest.importorskip("lightning.pytorch")
    from prefetch.lightning import PrefetchDataModule

    images, dataset = _data()

    class Data(pl.LightningDataModule):
        def train_dataloader(self):
            return torch.utils.data.DataLoader(dataset, batch_size=4)

        def val_dataloader(self):
            return torch.utils.data.DataLoader(dataset, batch_size=8)

        def test_dataloader(self):
            return torch.utils.data.DataLoader(dataset, batch_size=4)

        def predict_dataloader(self):
            return torch.utils.data.DataLoader(dataset, batch_size=8)

    val_aug = prefetch.FusedAugment(MEAN, STD, crop=8, center_crop=True, hflip=0.0, seed=1)
    dm = PrefetchDataModule(Data(), val_transform=val_aug, depth=2)
    model = eval_model(pl)
    trainer = cpu_trainer(pl, max_epochs=1, num_sanity_val_steps=0, enable_checkpointing=False)
    trainer.test(model, datamodule=dm)
    _assert_transformed(model.got["test"], images, 4)  # test_transform defaults to val_transform
    assert dm._open == []
    predictions = trainer.predict(model, datamodule=dm)
    assert [p[0] for p in predictions] == [0, 0]
    _assert_transformed(predictions, images, 8)  # predict_transform defaults to test_transform
    _assert_transformed(model.got["predict"], images, 8)
    trainer.validate(model, datamodule=dm)
    _assert_transformed(model.got["val"], images, 8)
    assert dm._open == []
    # Their own transforms, and None for none: then the batches are the plain loader's.
    dm = PrefetchDataModule(Data(), val_transform=val_aug, test_transform=None,
                            predict_transform=None)
    model = eval_model(pl)
    trainer.test(model, datamodule=dm)
    _assert_plain(model.got["test"], Data().test_dataloader())
    predictions = trainer.predict(model, datamodule=dm)
    _assert_plain(predictions, Data().predict_dataloader())
    # Fit, then test, on one Trainer and one datamodule.
    model = eval_model(pl)
    trainer = cpu_trainer(pl, max_epochs=1, num_sanity_val_steps=0, enable_checkpointing=False)
    dm = PrefetchDataModule(Data(), val_transform=val_aug)
    trainer.fit(model, datamodule=dm)
    trainer.test(model, datamodule=dm)
    _assert_transformed(model.got["test"], images, 4)
    assert dm._open == []


@multiprocess
def test_lightning_test_only_data_and_loaders_given_directly():
    pl = pytest.importorskip("lightning.pytorch")
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from prefetch.lightning import PrefetchDataModule

    images, dataset = _data(12, seed=7)

    class OnlyTest(pl.LightningDataModule):
        def test_dataloader(self):
            return torch.utils.data.DataLoader(dataset, batch_size=4)

    trainer = cpu_trainer(pl, max_epochs=1, enable_checkpointing=False)
    model = eval_model(pl)
    dm = PrefetchDataModule(OnlyTest())
    trainer.test(model, datamodule=dm)  # fit was never called
    _assert_plain(model.got["test"], OnlyTest().test_dataloader())
    # No data for the other stages: Lightning's own clear errors, no empty loop.
    with pytest.raises(MisconfigurationException, match="predict_dataloader"):
        trainer.predict(model, datamodule=dm)
    with pytest.raises(MisconfigurationException, match="train_dataloader"):
        cpu_trainer(pl, max_epochs=1, enable_checkpointing=False).fit(model, datamodule=dm)
    # Loaders given directly, without a datamodule, and a transform for test only.
    aug = prefetch.FusedAugment(MEAN, STD, crop=8, center_crop=True, hflip=0.0)
    loader = torch.utils.data.DataLoader(dataset, batch_size=3)
    dm = PrefetchDataModule(test=lambda: torch.utils.data.DataLoader(dataset, batch_size=4),
                            predict=loader, test_transform=aug)
    model = eval_model(pl)
    trainer.test(model, datamodule=dm)
    _assert_transformed(model.got["test"], images, 4)
    _assert_transformed(trainer.predict(model, datamodule=dm), images, 3)  # test's transform
    # LightningDataModule.from_datasets sets its loaders on the instance: they are found too.
    dm = PrefetchDataModule(pl.LightningDataModule.from_datasets(
        train_dataset=dataset, val_dataset=dataset, test_dataset=dataset, batch_size=4))
    model = eval_model(pl)
    trainer.validate(model, datamodule=dm)
    trainer.test(model, datamodule=dm)
    _assert_plain(model.got["val"], torch.utils.data.DataLoader(dataset, batch_size=4))
    _assert_plain(model.got["test"], torch.utils.data.DataLoader(dataset, batch_size=4))
    # trainer.test(dataloaders=...) bypasses the datamodule entirely: plain batches.
    model = eval_model(pl)
    trainer.test(model, dataloaders=torch.utils.data.DataLoader(dataset, batch_size=6))
    _assert_plain(model.got["test"], torch.utils.data.DataLoader(dataset, batch_size=6))


@multiprocess
def test_lightning_several_eval_loaders_are_each_wrapped():
    """A *_dataloader returning a list or dict of loaders (Lightning's multiple dataloaders):
    each loader goes through its own Prefetcher, and each step gets its loader's batches."""
    pl = pytest.importorskip("lightning.pytorch")
    from prefetch.lightning import PrefetchDataModule

    _, dataset = _data(12, seed=9)
    small = torch.utils.data.TensorDataset(dataset.tensors[0][:6], dataset.tensors[1][:6])

    class Data(pl.LightningDataModule):
        def val_dataloader(self):
            return [torch.utils.data.DataLoader(dataset, batch_size=4),
                    torch.utils.data.DataLoader(small, batch_size=3)]

        def test_dataloader(self):
            return {"a": torch.utils.data.DataLoader(dataset, batch_size=6),
                    "b": torch.utils.data.DataLoader(small, batch_size=2)}

    dm = PrefetchDataModule(Data())
    model = eval_model(pl)
    trainer = cpu_trainer(pl, max_epochs=1, enable_checkpointing=False)
    trainer.validate(model, datamodule=dm)
    trainer.test(model, datamodule=dm)
    for stage, loaders in (("val", Data().val_dataloader()),
                           ("test", list(Data().test_dataloader().values()))):
        for idx, loader in enumerate(loaders):
            _assert_plain([g for g in model.got[stage] if g[0] == idx], loader, idx)
    assert dm._open == []


@multiprocess
@pytest.mark.parametrize("fail", ["none", "test", "predict", "val", "limit"])
def test_lightning_teardown_leaves_no_thread(fail):
    """Every Prefetcher opened for validate/test/predict is closed when the stage ends, when a
    step raises (Lightning calls no teardown hook then), and when the stage stops mid-epoch
    (limit_*_batches=1: the producer is blocked on a full ring): the process has the threads it
    had."""
    pytest.importorskip("lightning.pytorch")
    out = run_child("""
        import os, torch, prefetch, lightning.pytorch as pl
        from tests.test_hardening_integrations import eval_model, _data
        from tests.integrations.test_lightning import cpu_trainer
        from prefetch.lightning import PrefetchDataModule

        def tasks():
            return len(os.listdir("/proc/self/task"))

        _, dataset = _data()

        class Data(pl.LightningDataModule):
            raised = []
            def val_dataloader(self):
                return torch.utils.data.DataLoader(dataset, batch_size=4)
            test_dataloader = predict_dataloader = val_dataloader
            def on_exception(self, exception):  # forwarded by the wrapper
                self.raised.append(str(exception))

        fail = %r
        def run(dm, fail_at=None):
            limits = {"limit_" + s + "_batches": 1 for s in ("val", "test", "predict")}
            trainer = cpu_trainer(pl, max_epochs=1, enable_checkpointing=False,
                                  **(limits if fail == "limit" else {}))
            model = eval_model(pl, fail_at)
            for stage, call in (("val", trainer.validate), ("test", trainer.test),
                                ("predict", trainer.predict)):
                try:
                    call(model, datamodule=dm)
                except RuntimeError as exc:
                    assert fail_at == (stage, 1) and "on purpose" in str(exc), exc
                    return  # no later stage whose teardown could close what this one left

        run(Data())  # warm-up without prefetch: Lightning's and torch's own threads
        with prefetch.Prefetcher([torch.zeros(2)], device="cpu") as pf:
            list(pf)
        before = tasks()
        dm = PrefetchDataModule(Data(), num_threads=2, depth=2)
        run(dm, (fail, 1) if fail in ("val", "test", "predict") else None)
        failed = fail in ("val", "test", "predict")
        raised = dm.datamodule.raised
        assert raised == (["step failed on purpose"] if failed else []), raised
        after = tasks()
        print("tasks", before, after, len(dm._open), flush=True)
        assert dm._open == [], dm._open
        assert after == before, (before, after)
        print("ok", flush=True)
    """ % fail, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]


@multiprocess
def test_lightning_ddp_test_stage_under_torchrun(tmp_path):
    """examples/lightning_train.py fits, then runs trainer.test, with 2 CPU ranks: the Trainer's
    DistributedSampler reached the test loader through the wrapper (disjoint shards that cover
    the dataset, in order)."""
    pytest.importorskip("lightning.pytorch")
    import json

    from .integrations.test_ddp import run_torchrun

    samples = 64
    run_torchrun("lightning_train.py", ["--samples", samples, "--image-size", 12, "--epochs", 1,
                                        "--batch-size", 8, "--out", tmp_path], timeout=300)
    tested = [json.loads((tmp_path / ("rank%d.json" % r)).read_text())["tested"] for r in range(2)]
    assert len(tested[0]) == len(tested[1]) == samples // 2
    assert sorted(tested[0] + tested[1]) == list(range(samples))
    assert tested[0] == list(range(0, samples, 2))  # DistributedSampler(shuffle=False)'s shard


@multiprocess
def test_lightning_reloaded_loaders_close_the_ones_they_replace():
    """reload_dataloaders_every_n_epochs=1: the Trainer asks for new train and val loaders every
    epoch and drops the old ones; their Prefetchers (and threads) must not pile up until the end
    of the fit. Every epoch still gets the plain loader's batches."""
    pl = pytest.importorskip("lightning.pytorch")
    from prefetch.lightning import PrefetchDataModule

    _, dataset = _data(8, seed=11)

    class Data(pl.LightningDataModule):
        def train_dataloader(self):
            return torch.utils.data.DataLoader(dataset, batch_size=4)

        val_dataloader = train_dataloader

    live = []

    class Count(pl.Callback):
        def on_train_epoch_end(self, trainer, module):
            live.append(sum(not p.closed for p in dm._open))

    dm = PrefetchDataModule(Data(), num_threads=1, depth=2)
    model = eval_model(pl)
    cpu_trainer(pl, max_epochs=4, reload_dataloaders_every_n_epochs=1, num_sanity_val_steps=0,
                enable_checkpointing=False, callbacks=[Count()]).fit(model, datamodule=dm)
    assert live and max(live) <= 2, live  # the epoch's train and val Prefetchers, no more
    assert dm._open == []
    expected = list(torch.utils.data.DataLoader(dataset, batch_size=4))
    assert len(model.got["val"]) == 4 * len(expected)
    for i, (_, x, y) in enumerate(model.got["val"]):
        assert torch.equal(x, expected[i % 2][0]) and torch.equal(y, expected[i % 2][1])
