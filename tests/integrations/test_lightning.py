"""Lightning's Trainer through PrefetchDataModule: the batches the module gets (on its device,
through the transforms, with the Trainer's epochs), checkpoints and mid-epoch resume, an
ArrayLoader as the loader, validation, and DDP under torchrun. Lightning is an optional extra:
these tests skip without it (CI installs it)."""
import json

import pytest
import torch

import prefetch

from ..reference import reference
from .test_ddp import run_torchrun

MEAN, STD = [0.5, 0.45, 0.4], [0.22, 0.25, 0.2]


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
