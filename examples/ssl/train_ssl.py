"""Self-supervised pretraining fed by prefetch: DINO's multi-crop (a student and an EMA teacher)
or SimCLR's two views (NT-Xent), from a folder of JPEG files, with a small CNN.

    python examples/ssl/train_ssl.py --method dino --images DIR        # your JPEGs
    python examples/ssl/train_ssl.py --method simclr --make 256        # synthetic JPEGs
    python examples/ssl/train_ssl.py --method dino --device cuda       # a GPU

Before (the repositories' way): the dataset's transform makes every view of each image in the
DataLoader's workers, PIL-decoding and resizing per view::

    dataset = ImageFolder(root, transform=DataAugmentationDINO((0.4, 1.0), (0.05, 0.4), 8))
    loader = DataLoader(dataset, batch_size=64, num_workers=8)
    for views, _ in loader: ...                       # views: a list of 10 batches

After: the dataset yields the files' bytes, and the views are made per batch — each view's
crop, flip, colour jitter, grayscale, blur and solarize fused, each image with its own draws, in
C++ threads (each image decoded once for all its views, only the box its views' windows span;
for a GPU that decode is done before the copy and the rest runs on the GPU)::

    loader = DataLoader(JpegFiles(paths), batch_size=64, num_workers=2,
                        collate_fn=prefetch.collate.samples)
    views = ssl.dino_views(decode=True, seed=0)
    for views, _ in prefetch.Prefetcher(loader, device="cuda", transform=views): ...

The model, the losses and the schedules are the papers' in miniature (DINO: centering and
sharpening of the teacher, temperatures 0.1 / 0.04, the teacher on the global views only,
momentum 0.996; SimCLR: NT-Xent at temperature 0.5); they show the loop, not a recipe to train.
"""
import argparse
import copy
import glob
import os
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import prefetch
from prefetch.transforms import ssl


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--method", choices=["dino", "simclr"], default="dino")
    p.add_argument("--images", default=None, help="a folder of .jpg files (default: --make)")
    p.add_argument("--make", type=int, default=128, help="synthetic JPEGs to write without --images")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers (they read files)")
    p.add_argument("--global-size", type=int, default=96, help="the global views' side")
    p.add_argument("--local-size", type=int, default=48, help="DINO's local views' side")
    p.add_argument("--local-crops", type=int, default=4, help="DINO's local_crops_number")
    p.add_argument("--blur-kernel", type=int, default=23)
    p.add_argument("--device", default="cpu")
    return p.parse_args(argv)


class JpegFiles(Dataset):
    """The files' bytes as uint8 tensors (prefetch decodes them), and no label."""

    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8), 0


def write_images(directory, n, seed=0):
    """``n`` photo-like JPEGs (smooth colour fields and noise, 160-240 pixels a side)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for k in range(n):
        h, w = (int(v) for v in rng.integers(160, 240, 2))
        field = rng.integers(0, 256, (h // 16 + 1, w // 16 + 1, 3)).astype(np.uint8)
        img = Image.fromarray(field).resize((w, h), Image.BICUBIC)
        noise = rng.normal(0, 6, (h, w, 3))
        img = Image.fromarray(np.clip(np.asarray(img) + noise, 0, 255).astype(np.uint8))
        img.save(os.path.join(directory, "%05d.jpg" % k), quality=90)
    return sorted(glob.glob(os.path.join(directory, "*.jpg")))


class Encoder(nn.Module):
    """A small CNN backbone and a projection head: any view size in, ``dim`` features out."""

    def __init__(self, dim=128, width=32):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, width, 3, 2, 1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, 2, 1), nn.BatchNorm2d(2 * width), nn.ReLU(),
            nn.Conv2d(2 * width, 4 * width, 3, 2, 1), nn.BatchNorm2d(4 * width), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(4 * width, 256), nn.GELU(), nn.Linear(256, dim))

    def forward(self, x):
        return self.head(self.backbone(x))


def nt_xent(a, b, temperature=0.5):
    """SimCLR's loss: each view's positive is the other view of its image, the 2N - 2 others in
    the batch its negatives."""
    z = F.normalize(torch.cat([a, b]), dim=1)
    logits = z @ z.t() / temperature
    logits.fill_diagonal_(float("-inf"))
    n = a.shape[0]
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(n)]).to(a.device)
    return F.cross_entropy(logits, targets)


class DinoLoss(nn.Module):
    """DINO's loss: the teacher's centred, sharpened distribution on each global view against
    the student's on every other view; the centre an EMA of the teacher's outputs."""

    def __init__(self, dim, student_temp=0.1, teacher_temp=0.04, center_momentum=0.9):
        super().__init__()
        self.student_temp, self.teacher_temp, self.center_momentum = (student_temp, teacher_temp,
                                                                      center_momentum)
        self.register_buffer("center", torch.zeros(1, dim))

    def forward(self, student_out, teacher_out):
        teacher = [F.softmax((t - self.center) / self.teacher_temp, dim=-1) for t in teacher_out]
        total, terms = 0.0, 0
        for i, t in enumerate(teacher):
            for j, s in enumerate(student_out):
                if i == j:
                    continue  # a global view is not compared with itself
                total = total + torch.sum(-t * F.log_softmax(s / self.student_temp, dim=-1), -1).mean()
                terms += 1
        with torch.no_grad():
            batch_center = torch.cat(teacher_out).mean(0, keepdim=True)
            self.center.mul_(self.center_momentum).add_(batch_center, alpha=1 - self.center_momentum)
        return total / terms


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if args.images:
        paths = sorted(glob.glob(os.path.join(args.images, "*.jpg")) +
                       glob.glob(os.path.join(args.images, "*.jpeg")))
    else:
        paths = write_images(tempfile.mkdtemp(prefix="prefetch-ssl-"), args.make)
    if args.method == "dino":
        views = ssl.dino_views(args.global_size, args.local_size,
                               local_crops_number=args.local_crops, blur_kernel=args.blur_kernel,
                               decode=True, seed=0)
    else:
        views = ssl.simclr_views(args.global_size, blur_kernel=args.blur_kernel, decode=True, seed=0)
    loader = DataLoader(JpegFiles(paths), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, drop_last=True,
                        collate_fn=prefetch.collate.samples, persistent_workers=args.workers > 0)

    student = Encoder().to(device)
    teacher = copy.deepcopy(student).requires_grad_(False)
    dino_loss = DinoLoss(128).to(device)
    optimizer = torch.optim.AdamW(student.parameters(), lr=1e-3)
    with prefetch.Prefetcher(loader, device=device, transform=views) as batches:
        for epoch in range(args.epochs):
            start, losses, shapes = time.perf_counter(), [], None
            for crops, _ in batches:
                shapes = [tuple(c.shape) for c in crops]
                if args.method == "dino":
                    student_out = [student(c) for c in crops]
                    with torch.no_grad():
                        teacher_out = [teacher(c) for c in crops[:2]]  # the global views
                    loss = dino_loss(student_out, teacher_out)
                else:
                    loss = nt_xent(student(crops[0]), student(crops[1]))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                with torch.no_grad():  # the teacher: an EMA of the student (DINO)
                    for ps, pt in zip(student.parameters(), teacher.parameters()):
                        pt.mul_(0.996).add_(ps.detach(), alpha=0.004)
                losses.append(loss.item())
            assert losses and all(torch.isfinite(torch.tensor(losses))), losses
            print("epoch %d: %d batches, loss %.4f -> %.4f, %.1f s, views %s" % (
                epoch, len(losses), losses[0], losses[-1], time.perf_counter() - start, shapes))
    print("done")


if __name__ == "__main__":
    main()
