"""Is this training loop input-bound? A usual pipeline to try the harness on:

    python -m prefetch.bench --loader examples.bench_my_loader:make_loader \
        --step examples.bench_my_loader:make_step

make_loader returns a DataLoader with 2 workers whose samples are decoded-and-normalised float
images (the usual per-sample work in the workers); make_step builds a small CNN and returns its
training step, a function of one batch. Replace both with your own: the harness only needs a
function returning the loader and a step taking one batch.
"""
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class Images(Dataset):
    """uint8 HWC images in memory, returned as normalised float CHW with a random flip."""

    def __init__(self, n=2048, size=96, classes=10):
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (n, size, size, 3), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, classes, (n,), generator=g)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        x = self.images[i].permute(2, 0, 1).float().div_(255)
        if torch.rand(()) < 0.5:
            x = x.flip(-1)
        return (x - MEAN) / STD, int(self.labels[i])


def make_loader():
    return DataLoader(Images(), batch_size=64, shuffle=True, num_workers=2,
                      persistent_workers=False)


def make_step():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                          nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(batch):
        images, labels = batch
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        loss = F.cross_entropy(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step
