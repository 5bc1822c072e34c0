"""Lightning's Trainer through PrefetchDataModule: the batches the module gets (on its device,
through the transforms, with the Trainer's epochs), checkpoints and mid-epoch resume, an
ArrayLoader as the loader; validate, test and predict (their transforms, several loaders per
stage, data given directly); every Prefetcher a stage opens closed when it ends, stops early or
raises, and the loaders a reload replaces; DDP under torchrun, fit and test. References are a
plain DataLoader's batches and the transform's float64 reference. Lightning is an optional
extra: these tests skip without it (CI installs it)."""
import json

import pytest
import torch

import prefetch

from ..conftest import SANITIZED
from ..helpers import run_child
from ..reference import reference
from .test_ddp import run_torchrun

MEAN, STD = [0.5, 0.45, 0.4], [0.22, 0.25, 0.2]

# Ray, Lightning and torchrun start other processes and threads of their own; under the
# sanitized extension (scripts/sanitize.sh python) they are left to the regular run, as .ci/run
# leaves tests/integrations.
multiprocess = pytest.mark.skipif(SANITIZED, reason="Ray/Lightning/torchrun: regular run only")


def recording_model(pl):
    """A LightningModule class that records every batch it gets, for training and validation:
    (epoch, batch index, images, labels) on the CPU. A uint8 batch (a run without prefetch) is
    cropped and cast as the augmentation would, so the same linear layer takes both."""

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(3 * 8 * 8, 2)
            self.seen, self.val = [], []

        def training_step(self, batch, batch_idx):
            x, y = batch
            assert x.device == self.device and y.device == self.device
            if x.dtype == torch.uint8:
                x = x[:, 1:9, 1:9].permute(0, 3, 1, 2).float()
            self.seen.append((self.current_epoch, batch_idx, x.detach().cpu().clone(), y.cpu().clone()))
            return self.layer(x.flatten(1)).sum()

        def validation_step(self, batch, batch_idx):
            self.val.append((batch[0].cpu(), batch[1].cpu()))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Model


def cpu_trainer(pl, **kwargs):
    """A quiet single-process CPU Trainer; `kwargs` add to or override the defaults."""
    options = dict(max_epochs=2, accelerator="cpu", devices=1, logger=False,
                   enable_progress_bar=False, enable_model_summary=False)
    options.update(kwargs)
    return pl.Trainer(**options)


def labelled_images(n, seed):
    """The Lightning tests' data: n uint8 images [n, 10, 10, 3] drawn from `seed` (10 x 10, so the
    augmentation's and recording_model's 8 x 8 crops fit), and their labels 0..n-1."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 10, 10, 3), dtype=torch.uint8, generator=g), torch.arange(n)


def test_lightning_trainer_gets_exactly_the_expected_batches_on_the_module_device(tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from prefetch.lightning import PrefetchDataModule

    images, labels = labelled_images(48, seed=0)
    dataset = torch.utils.data.TensorDataset(images, labels)

    class Data(pl.LightningDataModule):
        def train_dataloader(self):
            return torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=False)

    aug = prefetch.FusedAugment(MEAN, STD, crop=8, padding=1, hflip=0.5, vflip=0.5, seed=4)
    dm = PrefetchDataModule(Data(), train_transform=aug, depth=2)
    model = recording_model(pl)()
    # Checkpointing on: Lightning saves the loader's state_dict() with every checkpoint.
    cpu_trainer(pl, default_root_dir=str(tmp_path)).fit(model, datamodule=dm)
    assert list(tmp_path.rglob("*.ckpt")), "no checkpoint was written"
    assert [(e, i) for e, i, _, _ in model.seen] == [(e, i) for e in range(2) for i in range(6)]
    for epoch, index, x, y in model.seen:
        # Plain iteration of the source, then the documented draws for (epoch, index) applied by
        # the float64 reference.
        src_x, src_y = images[index * 8:(index + 1) * 8], labels[index * 8:(index + 1) * 8]
        d = aug.draws(8, 10, 10, epoch, index)
        ref = reference(src_x, MEAN, STD, hflip=d["hflip"], vflip=d["vflip"], crop=d["crop"],
                        offsets=d["offsets"])
        assert torch.equal(y, src_y)
        assert x.dtype == torch.float32 and x.shape == ref.shape
        assert torch.allclose(x.double(), ref, atol=1e-5), (epoch, index)
    # The two epochs drew differently: the Trainer's epoch reached the transform.
    assert not torch.equal(model.seen[0][2], model.seen[6][2])
    assert dm._open == []  # teardown closed the Prefetchers


def test_lightning_mid_epoch_resume_with_a_stateful_dataloader(tmp_path):
    """A run restored from a checkpoint taken after 2 of 6 steps continues with exactly the
    uninterrupted run's batches 2..5 (labels and augmented images), and afterwards sees what
    Lightning with the same StatefulDataLoader and no prefetch sees after the same restore."""
    pl = pytest.importorskip("lightning.pytorch")
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    from prefetch.lightning import PrefetchDataModule

    dataset = torch.utils.data.TensorDataset(*labelled_images(48, seed=0))

    class Data(pl.LightningDataModule):
        def train_dataloader(self):
            return sdl.StatefulDataLoader(dataset, batch_size=8, shuffle=True,
                                          generator=torch.Generator().manual_seed(1))

    def fit(root, with_prefetch, ckpt=None):
        aug = prefetch.FusedAugment(MEAN, STD, crop=8, padding=1, hflip=0.5, seed=4)
        dm = PrefetchDataModule(Data(), train_transform=aug, depth=3) if with_prefetch else Data()
        model = recording_model(pl)()
        every_2 = pl.callbacks.ModelCheckpoint(dirpath=str(root), every_n_train_steps=2,
                                               save_top_k=-1, filename="{epoch}-{step}")
        cpu_trainer(pl, callbacks=[every_2]).fit(model, datamodule=dm, ckpt_path=ckpt)
        return model.seen

    full = fit(tmp_path / "a", True)
    rest = fit(tmp_path / "b", True, str(tmp_path / "a" / "epoch=0-step=2.ckpt"))
    assert [s[:2] for s in rest] == [(0, i) for i in range(2, 6)] + [(1, i) for i in range(6)]
    for a, b in zip(full[2:6], rest[:4]):
        assert torch.equal(a[3], b[3]) and torch.equal(a[2], b[2]), a[:2]
    fit(tmp_path / "c", False)
    plain = fit(tmp_path / "d", False, str(tmp_path / "c" / "epoch=0-step=2.ckpt"))
    assert [s[:2] for s in plain] == [s[:2] for s in rest]
    assert all(torch.equal(p[3], r[3]) for p, r in zip(plain, rest))


def test_lightning_with_an_array_loader_follows_the_trainer_epochs(tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from prefetch.lightning import PrefetchDataModule

    images, labels = labelled_images(40, seed=2)

    def make_loader(device):
        aug = prefetch.FusedAugment(MEAN, STD, crop=8, padding=1, hflip=0.5, seed=6)
        return prefetch.ArrayLoader((images, labels), 8, seed=3, transform=aug, device=device)

    class Data(pl.LightningDataModule):
        def train_dataloader(self):
            return make_loader(self.trainer.strategy.root_device)

    model = recording_model(pl)()
    cpu_trainer(pl, default_root_dir=str(tmp_path)).fit(model, datamodule=PrefetchDataModule(Data()))
    # The reference: the same ArrayLoader iterated by hand, epoch 0 then epoch 1.
    with make_loader("cpu") as loader:
        expected = []
        for epoch in range(2):
            loader.set_epoch(epoch)
            expected.extend(loader)
    assert len(model.seen) == len(expected) == 10
    for (_, _, x, y), (ex, ey) in zip(model.seen, expected):
        assert torch.equal(y, ey) and torch.equal(x, ex)


def test_lightning_validation_goes_through_a_prefetcher_too():
    pl = pytest.importorskip("lightning.pytorch")
    from prefetch.lightning import PrefetchDataModule

    images, labels = labelled_images(16, seed=5)
    dataset = torch.utils.data.TensorDataset(images, labels)

    class Data(pl.LightningDataModule):
        def train_dataloader(self):
            return torch.utils.data.DataLoader(dataset, batch_size=4)

        def val_dataloader(self):
            return torch.utils.data.DataLoader(dataset, batch_size=8)

    val_aug = prefetch.FusedAugment(MEAN, STD, crop=8, center_crop=True, hflip=0.0, seed=1)
    model = recording_model(pl)()
    cpu_trainer(pl, max_epochs=1, num_sanity_val_steps=0, enable_checkpointing=False).fit(
        model, datamodule=PrefetchDataModule(Data(), val_transform=val_aug))
    assert len(model.val) == 2
    for i, (x, y) in enumerate(model.val):
        ref = reference(images[i * 8:(i + 1) * 8], MEAN, STD, crop=(8, 8))
        assert torch.equal(y, torch.arange(i * 8, (i + 1) * 8))
        assert torch.allclose(x.double(), ref, atol=1e-5)


def test_lightning_ddp_under_torchrun_injects_the_distributed_sampler(tmp_path):
    pytest.importorskip("lightning.pytorch")
    samples = 256
    run_torchrun("lightning_train.py", ["--samples", samples, "--image-size", 16,
                                        "--out", tmp_path], timeout=300)
    records = [json.loads((tmp_path / ("rank%d.json" % r)).read_text()) for r in range(2)]
    assert all(r["world_size"] == 2 and r["device"] == "cpu" for r in records)
    for epoch in ("0", "1"):
        a, b = records[0]["seen"][epoch], records[1]["seen"][epoch]
        assert len(a) == len(b) == samples // 2 and not set(a) & set(b)
        assert sorted(a + b) == list(range(samples))
    # The Trainer's epoch reached the injected sampler: each epoch has its own order.
    assert records[0]["seen"]["0"] != records[0]["seen"]["1"]


# ---- validate, test and predict -------------------------------------------------------------------


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
        from tests.integrations.test_lightning import _data, cpu_trainer, eval_model
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


@multiprocess
def test_lightning_ddp_test_stage_under_torchrun(tmp_path):
    """examples/lightning_train.py fits, then runs trainer.test, with 2 CPU ranks: the Trainer's
    DistributedSampler reached the test loader through the wrapper (disjoint shards that cover
    the dataset, in order)."""
    pytest.importorskip("lightning.pytorch")
    samples = 64
    run_torchrun("lightning_train.py", ["--samples", samples, "--image-size", 12, "--epochs", 1,
                                        "--batch-size", 8, "--out", tmp_path], timeout=300)
    tested = [json.loads((tmp_path / ("rank%d.json" % r)).read_text())["tested"] for r in range(2)]
    assert len(tested[0]) == len(tested[1]) == samples // 2
    assert sorted(tested[0] + tested[1]) == list(range(samples))
    assert tested[0] == list(range(0, samples, 2))  # DistributedSampler(shuffle=False)'s shard


@multiprocess
def test_lightning_limit_train_batches_keeps_the_order_of_later_epochs_independent_of_timing():
    """limit_train_batches breaks every epoch off before its end; whether the Prefetcher's
    read-ahead had reached the sampler's end by then (a slow training step) or not (a slow
    Dataset), the epochs' orders are the same, and are those of a plain DataLoader whose epochs
    run to their end (see tests/loaders/test_prefetcher.py)."""
    pl = pytest.importorskip("lightning.pytorch")
    import time

    from prefetch.lightning import PrefetchDataModule

    images, labels = labelled_images(40, seed=2)

    class Slow(torch.utils.data.Dataset):
        def __init__(self, delay):
            self.delay = delay

        def __len__(self):
            return 40

        def __getitem__(self, i):
            time.sleep(self.delay)
            return images[i], labels[i]

    def loader(delay):
        return torch.utils.data.DataLoader(Slow(delay), batch_size=4, shuffle=True,
                                           generator=torch.Generator().manual_seed(9))

    def labels_seen(dataset_delay, step_delay):
        class Data(pl.LightningDataModule):
            def train_dataloader(self):
                return loader(dataset_delay)

        class Model(recording_model(pl)):
            def training_step(self, batch, batch_idx):
                time.sleep(step_delay)
                return super().training_step(batch, batch_idx)

        model = Model()
        cpu_trainer(pl, max_epochs=3, limit_train_batches=8, enable_checkpointing=False).fit(
            model, datamodule=PrefetchDataModule(Data(), depth=3))
        return [[y.tolist() for e, _, _, y in model.seen if e == epoch] for epoch in range(3)]

    slow_step = labels_seen(0.0, 0.05)
    slow_data = labels_seen(0.01, 0.0)
    plain = loader(0.0)
    whole = [[y.tolist() for _, y in plain][:8] for _ in range(3)]
    assert slow_step == slow_data == whole
