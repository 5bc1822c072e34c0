"""Beyond one process: DDP under torchrun (CPU, gloo), Lightning's Trainer, Ray Data as a source.
Lightning and Ray are optional extras: their tests skip without them (CI installs both)."""
import json
import os
import subprocess
import sys

import pytest
import torch

import prefetch

from ..helpers import ROOT
from ..reference import reference


def run_torchrun(script, args, timeout):
    """Runs examples/<script> with 2 CPU ranks under torchrun; fails the test on a hang or error."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           os.path.join(ROOT, "examples", script)] + [str(a) for a in args]
    # The ranks import the prefetch under test, installed or not (the scripts' own folder is
    # examples/, which does not hold it).
    tested = os.path.dirname(os.path.dirname(os.path.abspath(prefetch.__file__)))
    path = os.pathsep.join(p for p in (tested, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail("torchrun hung; output:\n%s\n%s" % (exc.stdout, exc.stderr))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def test_import_prefetch_pulls_in_neither_ray_nor_lightning():
    code = ("import sys, prefetch; heavy = [m for m in ('ray', 'lightning', 'pytorch_lightning') "
            "if m in sys.modules]; print(heavy); assert not heavy")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_ddp_example_under_torchrun_gives_each_rank_disjoint_covering_data(tmp_path):
    samples, epochs = 500, 2
    run_torchrun("ddp_train.py", ["--samples", samples, "--epochs", epochs, "--batch-size", 32,
                                  "--image-size", 16, "--out", tmp_path], timeout=240)
    records = [json.loads((tmp_path / ("rank%d.json" % r)).read_text()) for r in range(2)]
    assert [r["rank"] for r in records] == [0, 1]
    assert all(r["world_size"] == 2 and r["device"] == "cpu" for r in records)
    for loader in ("arrays", "dataloader"):
        for epoch in range(epochs):
            shards = [r[loader][str(epoch)] for r in records]
            assert len(shards[0]) == len(shards[1]) == samples // 2, (loader, epoch)
            assert not set(shards[0]) & set(shards[1]), (loader, epoch)
            assert sorted(shards[0] + shards[1]) == list(range(samples)), (loader, epoch)
        # A new order every epoch.
        assert records[0][loader]["0"] != records[0][loader]["1"]


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
