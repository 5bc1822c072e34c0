"""A Prefetcher or an ArrayLoader works wherever a DataLoader does under Lightning's defaults —
checkpointing (ModelCheckpoint saves every loader's state that has one), the progress bar, the
validation sanity check, ``limit_*_batches`` — returned by the LightningModule's hooks directly or
through PrefetchDataModule: ``fit()`` completes, the module sees each epoch's batches in the
order the source gives them with the transform's draws keyed to the Trainer's epoch, and a run
restored from the checkpoint taken at an epoch's end continues with the next epoch exactly.

References: the source iterated by hand, epoch after epoch (its orders), the Trainer's epoch and
batch index (the positions), and, for the restore, the uninterrupted run or Lightning with the
same source and no prefetch. Lightning is an optional extra: these tests skip without it."""
import pytest
import torch

import prefetch
from prefetch.transforms import Transform

from ..conftest import SANITIZED

pl = pytest.importorskip("lightning.pytorch")
sdl = pytest.importorskip("torchdata.stateful_dataloader")
pytestmark = pytest.mark.skipif(SANITIZED, reason="Lightning: regular run only")

N, BATCH = 24, 4


class Positions(Transform):
    """The batch with the (epoch, index) the loader keyed its draws to."""

    def apply(self, batch, position):
        return batch[0], batch[1], torch.tensor([position.epoch, position.index])


def _dataset():
    return torch.utils.data.TensorDataset(torch.randn(N, 3), torch.arange(N))


def make_source(kind, shuffle=True):
    """What the user's hook would build, without prefetch."""
    if kind == "dataloader":
        return torch.utils.data.DataLoader(_dataset(), batch_size=BATCH, shuffle=shuffle,
                                           generator=torch.Generator().manual_seed(3))
    if kind == "stateful_dataloader":
        return sdl.StatefulDataLoader(_dataset(), batch_size=BATCH, shuffle=shuffle,
                                      generator=torch.Generator().manual_seed(3))
    return prefetch.ArrayLoader((torch.randn(N, 3), torch.arange(N)), BATCH, shuffle=shuffle,
                                seed=3, transform=Positions())


def as_loader(source):
    """A hook's loader returned directly: the source in a Prefetcher (an ArrayLoader as it is)."""
    if isinstance(source, prefetch.ArrayLoader):
        return source
    return prefetch.Prefetcher(source, device="cpu", transform=Positions(), depth=2)


def model_class(way, kind):
    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)
            self.seen, self.val = [], []

        def training_step(self, batch, batch_idx):
            x, y, where = batch
            self.seen.append((self.current_epoch, batch_idx, tuple(where.tolist()), y.tolist()))
            return self.layer(x).sum()

        def validation_step(self, batch, batch_idx):
            self.val.append(batch[1].tolist())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    if way == "direct":
        Model.train_dataloader = lambda self: as_loader(make_source(kind))
        Model.val_dataloader = lambda self: as_loader(make_source(kind, shuffle=False))
    return Model


def fit(way, kind, root, max_epochs=2, ckpt_path=None, **trainer_kwargs):
    model = model_class(way, kind)()
    trainer = pl.Trainer(max_epochs=max_epochs, accelerator="cpu", devices=1,
                         default_root_dir=str(root), **trainer_kwargs)
    if way == "direct":
        trainer.fit(model, ckpt_path=ckpt_path)
    else:
        from prefetch.lightning import PrefetchDataModule

        class Data(pl.LightningDataModule):
            def train_dataloader(self):
                return make_source(kind)

            def val_dataloader(self):
                return make_source(kind, shuffle=False)

        dm = PrefetchDataModule(Data(), train_transform=Positions(), val_transform=Positions(),
                                depth=2)
        trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return model


def orders(kind, epochs):
    """The source's own orders, epoch after epoch: its sample ids per batch."""
    source = make_source(kind)
    out = []
    for epoch in range(epochs):
        if isinstance(source, prefetch.ArrayLoader):
            source.set_epoch(epoch)
        out.append([b[1].tolist() for b in source])
    return out


LIMITS = {"whole": {}, "limited": {"limit_train_batches": 2, "limit_val_batches": 1}}


@pytest.mark.parametrize("limits", sorted(LIMITS))
@pytest.mark.parametrize("kind", ["dataloader", "stateful_dataloader", "array_loader"])
@pytest.mark.parametrize("way", ["direct", "datamodule"])
def test_fit_with_lightnings_default_callbacks(tmp_path, way, kind, limits):
    model = fit(way, kind, tmp_path, **LIMITS[limits])
    assert list(tmp_path.rglob("*.ckpt")), "ModelCheckpoint wrote nothing"
    per_epoch = LIMITS[limits].get("limit_train_batches", N // BATCH)
    expected = orders(kind, 2)
    assert [s[:3] for s in model.seen] == [(e, i, (e, i)) for e in range(2)
                                           for i in range(per_epoch)]
    assert [s[3] for s in model.seen] == [b for e in range(2) for b in expected[e][:per_epoch]]
    # The sanity check's batches, then each epoch's validation, in the dataset's order.
    val_per_run = LIMITS[limits].get("limit_val_batches", N // BATCH)
    sanity = min(2, val_per_run)
    in_order = [list(range(i, i + BATCH)) for i in range(0, N, BATCH)]
    assert model.val == in_order[:sanity] + 2 * in_order[:val_per_run]


@pytest.mark.parametrize("kind", ["stateful_dataloader", "array_loader"])
@pytest.mark.parametrize("way", ["direct", "datamodule"])
def test_a_run_restored_from_an_epoch_end_checkpoint_continues_with_the_next_epoch(tmp_path, way,
                                                                                    kind):
    """The checkpoint ModelCheckpoint writes at the end of epoch 1, restored into a 3-epoch fit.
    Through PrefetchDataModule the restored run trains epoch 2 exactly: the uninterrupted run's
    epoch 2 for an ArrayLoader (its order is a function of the epoch), and what Lightning with
    the same StatefulDataLoader and no prefetch trains on after the same restore. Returned
    directly, the loader is restored as Lightning restores a DataLoader: Lightning loads no loader
    state at an epoch-end restart (it restarts the loader, as a fresh one), so the StatefulDataLoader
    gives what it gives without prefetch, and the loaders count their epochs from 0 again."""
    fit(way, kind, tmp_path / "a", max_epochs=2)
    (ckpt,) = (tmp_path / "a").rglob("epoch=1-*.ckpt")
    restored = fit(way, kind, tmp_path / "b", max_epochs=3, ckpt_path=str(ckpt))
    loader_epoch = 2 if way == "datamodule" else 0
    assert [s[:3] for s in restored.seen] == [(2, i, (loader_epoch, i)) for i in range(N // BATCH)]
    if kind == "array_loader":
        whole = fit(way, kind, tmp_path / "c", max_epochs=3)
        assert [s[3] for s in restored.seen] == [s[3] for s in whole.seen
                                                 if s[0] == loader_epoch]
    else:
        plain = PlainLightning(tmp_path / "d")
        assert [s[3] for s in restored.seen] == plain.restored_labels


@pytest.mark.parametrize("kind", ["stateful_dataloader", "array_loader"])
@pytest.mark.parametrize("way", ["direct", "datamodule"])
def test_a_run_restored_mid_epoch_continues_exactly(tmp_path, way, kind):
    """A checkpoint after 2 of 6 steps (Lightning loads the loader's state): the restored run
    trains the uninterrupted run's steps 2..5 of epoch 0 with the same positions, then epoch 1 —
    the uninterrupted run's for an ArrayLoader; for a StatefulDataLoader (no workers), what the
    bare StatefulDataLoader resumed from the checkpoint's state gives for its next epoch
    (torchdata resumes its later epochs' orders differently from its uninterrupted run:
    tests/engine/test_resume_moments.py)."""
    every_2 = dict(callbacks=[pl.callbacks.ModelCheckpoint(
        dirpath=str(tmp_path / "ckpt"), every_n_train_steps=2, save_top_k=-1,
        filename="{epoch}-{step}")])
    whole = fit(way, kind, tmp_path / "a", **every_2)
    ckpt = tmp_path / "ckpt" / "epoch=0-step=2.ckpt"
    restored = fit(way, kind, tmp_path / "b", ckpt_path=str(ckpt))
    assert restored.seen[:4] == whole.seen[2:6]
    assert [s[:3] for s in restored.seen[4:]] == [(1, i, (1, i)) for i in range(N // BATCH)]
    if kind == "array_loader":
        assert restored.seen[4:] == whole.seen[6:]
    else:
        (saved,) = torch.load(ckpt, weights_only=False)["loops"]["fit_loop"]["state_dict"][
            "combined_loader"]
        bare = make_source(kind)
        bare.load_state_dict(saved["source"])
        assert len(list(bare)) == 4  # the rest of epoch 0
        assert [s[3] for s in restored.seen[4:]] == [b[1].tolist() for b in bare]


class PlainLightning:
    """Lightning with a StatefulDataLoader and no prefetch: 2 epochs, then a 3-epoch fit restored
    from the checkpoint written at the end of epoch 1; the labels that run trains on."""

    def __init__(self, root):
        class Model(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(3, 1)
                self.labels = []

            def training_step(self, batch, batch_idx):
                self.labels.append(batch[1].tolist())
                return self.layer(batch[0]).sum()

            def train_dataloader(self):
                return make_source("stateful_dataloader")

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        pl.Trainer(max_epochs=2, accelerator="cpu", default_root_dir=str(root / "x")).fit(Model())
        (ckpt,) = (root / "x").rglob("epoch=1-*.ckpt")
        model = Model()
        pl.Trainer(max_epochs=3, accelerator="cpu", default_root_dir=str(root / "y")).fit(
            model, ckpt_path=str(ckpt))
        self.restored_labels = model.labels
