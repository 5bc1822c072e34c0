"""A Lightning Trainer fed through prefetch.lightning.PrefetchDataModule, on one device or under
DDP (the Trainer reads torchrun's environment):

    python examples/lightning_train.py                                   # one process
    torchrun --standalone --nproc_per_node=2 examples/lightning_train.py # DDP, CPU (gloo) or GPUs

The DataModule returns plain DataLoaders; the wrapper lets the Trainer inject its
DistributedSampler, builds a Prefetcher on the LightningModule's device, and runs FusedAugment
there: random crops and flips for training, a center crop for ``trainer.test`` after the fit.
With ``--out DIR`` each rank writes the sample ids it trained and tested on to
``DIR/rank<r>.json``.
"""
import argparse
import json
import os

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import prefetch
from prefetch.lightning import PrefetchDataModule

MEAN, STD = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)


class Data(pl.LightningDataModule):
    def __init__(self, samples, size, batch_size):
        super().__init__()
        self.samples, self.size, self.batch_size = samples, size, batch_size

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        images = torch.randint(0, 256, (self.samples, self.size, self.size, 3), dtype=torch.uint8,
                               generator=g)
        self.dataset = TensorDataset(images, torch.arange(self.samples))

    def train_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=True,
                          collate_fn=prefetch.collate.samples)

    def test_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size,
                          collate_fn=prefetch.collate.samples)


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.head = torch.nn.Linear(16, 10)
        self.seen, self.tested = {}, []

    def training_step(self, batch, batch_idx):
        images, ids = batch
        assert images.device == self.device, (images.device, self.device)
        self.seen.setdefault(self.current_epoch, []).extend(ids.tolist())
        logits = self.head(F.relu(self.conv(images)).mean(dim=(2, 3)))
        return F.cross_entropy(logits, ids % 10)

    def test_step(self, batch, batch_idx):
        images, ids = batch
        assert images.device == self.device and images.dtype == torch.float32
        self.tested.extend(ids.tolist())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--out", default=None)
    args = p.parse_args()

    world = int(os.environ.get("WORLD_SIZE", 1))
    aug = prefetch.FusedAugment(MEAN, STD, crop=args.image_size, padding=4, hflip=0.5, seed=0)
    center = prefetch.FusedAugment(MEAN, STD, crop=args.image_size - 4, center_crop=True,
                                   hflip=0.0)
    dm = PrefetchDataModule(Data(args.samples, args.image_size, args.batch_size),
                            train_transform=aug, test_transform=center)
    model = Model()
    trainer = pl.Trainer(max_epochs=args.epochs, devices=world,
                         accelerator="gpu" if torch.cuda.is_available() else "cpu",
                         strategy="ddp" if world > 1 else "auto", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(model, datamodule=dm)
    trainer.test(model, datamodule=dm, verbose=False)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "rank%d.json" % trainer.global_rank), "w") as f:
            json.dump({"rank": trainer.global_rank, "world_size": trainer.world_size,
                       "device": str(model.device), "seen": model.seen,
                       "tested": model.tested}, f)


if __name__ == "__main__":
    main()
