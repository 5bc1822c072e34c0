"""DataLoader workers (issue 15's goals): whole epochs of pipelines with worker processes, timed
interleaved (``timing.interleaved``: A, B, C, A, B, C... in one run, at least 5 rounds), each
pipeline built once with persistent workers and warmed up one epoch, so worker start-up is not
what is compared. Every pipeline gets N (``--workers``): N DataLoader workers wherever there are
workers, N threads for prefetch's engine and decodes and for DALI; an epoch holds at least
``BATCHES_PER_WORKER`` batches per worker (``--quick``: one; the JPEG files repeated to fill
it), so no worker sits idle.

(1) Synthetic uint8 HWC images (a fresh tensor per ``__getitem__``, as a decode makes), for each
    batch size:
    - usual: DataLoader(default_collate), a per-sample random hflip with ``torch.flip`` in the
      worker, then in the main process ``.to(device)``, NCHW, float, /255, normalize (pinned
      memory and ``non_blocking`` on CUDA);
    - prefetch: Prefetcher(DataLoader(collate_fn=prefetch.collate.samples)) + FusedAugment;
    - prefetch_default_collate: Prefetcher(DataLoader(default_collate)) + the same FusedAugment;
    - engine: the in-process reference, a Prefetcher over ``prefetch.Samples`` batches made in
      the main process (no workers, no transform); its collation GB/s is ``stats()``'s
      ``bytes_collated`` over ``collate_s`` (as the collate section's ``collate_gbps``).
    - handoff: the "prefetch" pipeline without a transform (uint8 batches as delivered);
    - handoff_stored: the same over a dataset whose samples are already in memory (views of a
      stored array: no per-sample allocation, as the engine's in-process samples), with epochs
      four times longer — the hand-off itself, measured as the engine's collation is;
    The hand-off bandwidth is the uint8 image bytes per second the "prefetch" run delivers, and
    the same for "handoff": on the CPU device the first is bounded by FusedAugment running on the
    host (in the main process), the second by the hand-off and the main process's copy alone.
(2) JPEG: synthetic photo-like JPEGs (random sizes around 500x375, quality 90) decoded with PIL in
    the workers, RandomResizedCrop (torchvision's when importable, else its algorithm with PIL),
    then per pipeline:
    - usual: flip with ``torch.flip`` and an HWC uint8 tensor in the worker, normalize in the
      main process (as in (1));
    - usual_float: torchvision's recipe, everything in the worker: flip, ToTensor (float CHW /255),
      Normalize; the main process only moves the batch;
    - prefetch / prefetch_default_collate: an HWC uint8 tensor in the worker, flip + normalize
      in FusedAugment.
    Plus the CPU time one worker spends per image in each stage (measured in the main process
    with one intra-op thread, as workers run), and every pipeline's CPU time per image in the
    main process (``time.process_time``: all its threads) and in the workers (/proc, Linux).

Ratios are medians of per-repetition ratios (a repetition is one epoch of each pipeline, back to
back), with their min-max.
"""
import gc
import io
import math
import os
import shutil
import tempfile
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

import prefetch

from . import timing
from .ops import MEAN, STD
from .section import Section, SectionResult, resources

# Labels are class indices below this (what travels next to each image).
CLASSES = 1000


# --- CPU time --------------------------------------------------------------------------------

def children_cpu_s():
    """CPU seconds (user + system) of this process's child processes (the DataLoader workers):
    the live ones' from /proc, plus the ended ones' that the process has reaped
    (``os.times()``'s ``children_*``: a worker that ends between two reads — an epoch's
    non-persistent workers — counts its whole time there, its part before the first read having
    been counted live then, so a difference stays that interval's time); None where there is no
    /proc. Idle workers of the other pipelines add nothing. Resolution: 10 ms ticks (a quick run's
    few images make it coarse per image)."""
    if not os.path.isdir("/proc/self"):
        return None
    me, ticks = os.getpid(), 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, ... utime is field 14
        if int(fields[1]) == me:
            ticks += int(fields[11]) + int(fields[12])
    reaped = os.times()
    return ticks / os.sysconf("SC_CLK_TCK") + reaped.children_user + reaped.children_system


# --- the main process's part of the usual pipeline -------------------------------------------

_NORMALIZE = {}  # device -> (mean, std) [1, 3, 1, 1] on it, made once


def usual_to_device(images, device):
    """What users write after the DataLoader: to the device, NCHW, float, /255, normalize. The
    mean and std tensors are made once per device: made per batch, torch.tensor(..., device=cuda)
    is a blocking host-to-device copy that would synchronise the loop at every batch."""
    x = images.to(device, non_blocking=True).permute(0, 3, 1, 2).float().div_(255)
    key = torch.device(device)
    if key not in _NORMALIZE:
        _NORMALIZE[key] = (torch.tensor(MEAN, device=key).view(1, 3, 1, 1),
                           torch.tensor(STD, device=key).view(1, 3, 1, 1))
    mean, std = _NORMALIZE[key]
    return x.sub_(mean).div_(std)


def _random_hflip(x, dim):
    return torch.flip(x, (dim,)) if torch.rand(()) < 0.5 else x


# --- (1) synthetic images --------------------------------------------------------------------

class FreshImages(Dataset):
    """uint8 HWC images, each ``__getitem__`` a fresh tensor (as a decode makes), and a label;
    with ``flip`` the usual per-sample random horizontal flip, with ``torch.flip``."""

    def __init__(self, n, size, flip, pool=64, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.pool = torch.randint(0, 256, (min(pool, n), size, size, 3), dtype=torch.uint8, generator=g)
        self.n, self.flip = n, flip

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = self.pool[i % len(self.pool)].clone()
        return (_random_hflip(x, 1) if self.flip else x), i % CLASSES


class StoredImages(FreshImages):
    """The same images, returned as views of the stored array (a dataset decoded into RAM)."""

    def __getitem__(self, i):
        return self.pool[i % len(self.pool)], i % CLASSES


# --- (2) JPEGs ------------------------------------------------------------------------------

def write_jpegs(directory, n, scale=1.0, seed=0, quality=90):
    """`n` photo-like JPEGs of random sizes around 500x375 (a quarter portrait), times `scale`:
    colour fields at four scales plus mild noise, so that they compress like photos (~105 kB at
    500x375 and quality 90, about ImageNet's average; ~1.2 ms to decode on the 2-core VM).
    Returns their paths."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    octaves = (((6, 8), 0.7), ((24, 32), 0.4), ((96, 128), 0.4), ((190, 250), 0.3))
    paths = []
    for k in range(n):
        h, w = int(rng.integers(300, 451)), int(rng.integers(400, 601))
        if rng.random() < 0.25:
            h, w = w, h
        h, w = max(8, round(h * scale)), max(8, round(w * scale))
        pixels = 128 + rng.normal(0.0, 8.0, (h, w, 3)).astype(np.float32)
        for grid, amplitude in octaves:
            field = Image.fromarray(rng.integers(0, 256, grid + (3,), dtype=np.uint8))
            pixels += amplitude * (np.asarray(field.resize((w, h), Image.BICUBIC), np.float32) - 128)
        path = os.path.join(directory, "%05d.jpg" % k)
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path, quality=quality)
        paths.append(path)
    return paths


class PilRandomResizedCrop:
    """torchvision's RandomResizedCrop on a PIL image (its get_params: scale and log-ratio drawn
    with torch's RNG, 10 attempts, then the centre crop within the ratio bounds), bilinear, for
    machines without torchvision."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0)):
        self.size, self.scale, self.ratio = size, scale, ratio

    def params(self, width, height):
        area = height * width
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(self.scale[0], self.scale[1]).item()
            aspect = math.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1]).item())
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                i = torch.randint(0, height - h + 1, size=(1,)).item()
                j = torch.randint(0, width - w + 1, size=(1,)).item()
                return i, j, h, w
        in_ratio = float(width) / float(height)
        if in_ratio < min(self.ratio):
            w, h = width, int(round(width / min(self.ratio)))
        elif in_ratio > max(self.ratio):
            h, w = height, int(round(height * max(self.ratio)))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, img):
        from PIL import Image

        i, j, h, w = self.params(*img.size)
        return img.resize((self.size, self.size), Image.BILINEAR, box=(j, i, j + w, i + h))


def random_resized_crop(size):
    """torchvision.transforms.RandomResizedCrop(size) when torchvision is importable, else the
    same algorithm with PIL; returns (callable, which)."""
    try:
        from torchvision.transforms import RandomResizedCrop
        return RandomResizedCrop(size), "torchvision"
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return PilRandomResizedCrop(size), "pil"


def _to_tensor(img):
    """An HWC uint8 tensor of a PIL image (a copy, as torchvision's pil_to_tensor makes)."""
    return torch.from_numpy(np.array(img, dtype=np.uint8, copy=True))


class JpegImages(Dataset):
    """PIL decode + RandomResizedCrop, then per `mode`:
    "decoded": no crop: the decoded HWC uint8 image of its own size (the window, resize, flip and
    normalize come later, all in FusedAugment(random_resized_crop=...));
    "uint8": HWC uint8 (flip and normalize come later, in FusedAugment);
    "flip": per-sample random flip with torch.flip, HWC uint8 (normalize in the main process);
    "float": torchvision's recipe in the worker: flip, ToTensor (CHW float /255), Normalize."""

    def __init__(self, paths, size, mode):
        self.paths, self.mode = paths, mode
        self.crop, self.crop_impl = random_resized_crop(size)
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image

        with Image.open(self.paths[i]) as f:
            img = f.convert("RGB")
        if self.mode == "decoded":
            return _to_tensor(img), i % CLASSES
        x = _to_tensor(self.crop(img))
        if self.mode == "uint8":
            return x, i % CLASSES
        x = _random_hflip(x, 1)
        if self.mode == "float":
            x = x.permute(2, 0, 1).float().div_(255).sub_(self.mean).div_(self.std)
        return x, i % CLASSES


class JpegBytes(Dataset):
    """The files' bytes, read as a dataset of encoded images yields them: prefetch decodes them
    (FusedAugment(decode=True): only each random window, in C++ threads)."""

    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8), i % CLASSES


def stage_profile(paths, size, repeats=1):
    """Mean CPU microseconds per image of one worker's stages (this thread's CPU time, one
    intra-op thread as in a DataLoader worker): decode, crop+resize, to-tensor, flip, and the
    float conversion + normalize of torchvision's recipe."""
    from PIL import Image

    crop, _ = random_resized_crop(size)
    mean, std = torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)
    names = ("decode", "crop_resize", "to_tensor", "flip", "float_normalize")
    total = dict.fromkeys(names, 0.0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    clock = time.thread_time
    try:
        for _ in range(repeats):
            for path in paths:
                t0 = clock()
                with Image.open(path) as f:
                    img = f.convert("RGB")
                t1 = clock()
                img = crop(img)
                t2 = clock()
                x = _to_tensor(img)
                t3 = clock()
                x = torch.flip(x, (1,))  # every sample flipped: the cost of one flip
                t4 = clock()
                x.permute(2, 0, 1).float().div_(255).sub_(mean).div_(std)
                t5 = clock()
                for name, dt in zip(names, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                    total[name] += dt
    finally:
        torch.set_num_threads(threads)
    count = len(paths) * repeats
    us = {name: 1e6 * t / count for name, t in total.items()}
    # A worker's time per image in each pipeline: the "flip" pipeline flips half the samples.
    per_pipeline = {
        "prefetch": us["decode"] + us["crop_resize"] + us["to_tensor"],
        "usual": us["decode"] + us["crop_resize"] + us["to_tensor"] + 0.5 * us["flip"],
        "usual_float": (us["decode"] + us["crop_resize"] + us["to_tensor"] + 0.5 * us["flip"]
                        + us["float_normalize"]),
    }
    return {"us_per_image": us, "worker_us_per_image": per_pipeline, "images": count}


# --- pipelines and the interleaved timing ------------------------------------------------------

class Pipeline:
    """One pipeline built once (persistent workers, one Prefetcher), iterated epoch by epoch;
    ``resources`` is what it was built with (``section.resources``: DataLoader workers, threads
    in the main process)."""

    def __init__(self, name, batches, loader=None, prefetcher=None, *, workers=0, threads):
        self.name, self._batches = name, batches
        self.loader, self.prefetcher = loader, prefetcher
        self.resources = resources(workers=workers, threads=threads)

    def epoch(self):
        """One epoch; the number of images it delivered."""
        n = 0
        for images in self._batches():
            n += images.shape[0]
        return n

    def close(self):
        if self.prefetcher is not None:
            self.prefetcher.close()
        self.prefetcher = self.loader = self._batches = None


def _loader(ds, batch_size, workers, collate_fn, pin_memory=False):
    return DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                      collate_fn=collate_fn, persistent_workers=workers > 0, pin_memory=pin_memory)


def usual_pipeline(name, ds, batch_size, workers, device, normalize=True):
    """The usual pipeline: ``workers`` DataLoader workers; the main process's ``.to``, ToDtype
    and Normalize on torch's intra-op threads (N during a bench run)."""
    # pin_memory on CUDA, as users write it for non_blocking copies (the Prefetcher pins itself).
    loader = _loader(ds, batch_size, workers, default_collate, pin_memory=device.type == "cuda")

    def batches():
        for images, labels in loader:
            labels.to(device, non_blocking=True)
            yield usual_to_device(images, device) if normalize else images.to(device, non_blocking=True)
    return Pipeline(name, batches, loader=loader, workers=workers, threads=torch.get_num_threads())


def prefetch_pipeline(name, ds, batch_size, workers, device, collate_fn, threads, transform=True,
                      aug=None):
    loader = _loader(ds, batch_size, workers, collate_fn)
    if aug is None and transform:
        aug = prefetch.FusedAugment(MEAN, STD, hflip=0.5, seed=0)
    pf = prefetch.Prefetcher(loader, device=device, num_threads=threads, transform=aug)

    def batches():
        for images, _ in pf:
            yield images
    return Pipeline(name, batches, loader=loader, prefetcher=pf, workers=workers, threads=threads)


def webdataset_available():
    try:
        import webdataset  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return False
    return True


def write_shards(paths, directory, shards):
    """The files as webdataset tar shards (``NNNNNN.jpg`` and ``NNNNNN.cls`` members, the
    labels JpegBytes gives them), ``shards`` of them so that every worker reads its own."""
    import tarfile

    urls = []
    for s in range(shards):
        url = os.path.join(directory, "shard-%03d.tar" % s)
        with tarfile.open(url, "w") as tar:
            for i in range(s, len(paths), shards):
                tar.add(paths[i], arcname="%06d.jpg" % i)
                label = str(i % CLASSES).encode()
                info = tarfile.TarInfo("%06d.cls" % i)
                info.size = len(label)
                tar.addfile(info, io.BytesIO(label))
        urls.append(url)
    return urls


class _WdsDecode:
    """A webdataset sample as the usual pipeline's JpegImages("flip") makes it: PIL decode,
    RandomResizedCrop, HWC uint8, a random flip (picklable, for the workers)."""

    def __init__(self, size):
        self.crop, _ = random_resized_crop(size)

    def __call__(self, sample):
        from PIL import Image

        with Image.open(io.BytesIO(sample["jpg"])) as f:
            img = f.convert("RGB")
        return _random_hflip(_to_tensor(self.crop(img)), 1), int(sample["cls"])


def webdataset_pipeline(paths, directory, batch_size, workers, device, size):
    """webdataset's usual use: tar shards read sequentially by DataLoader workers (a shuffle
    buffer, one shard list per worker), PIL decode + the same transforms in the workers,
    default_collate, normalize in the main process."""
    import webdataset as wds

    urls = write_shards(paths, directory, max(2, 2 * workers))
    ds = (wds.WebDataset(urls, shardshuffle=len(urls), nodesplitter=None, seed=0, empty_check=False)
          .shuffle(256).map(_WdsDecode(size)))
    loader = DataLoader(ds, batch_size=batch_size, num_workers=workers, collate_fn=default_collate,
                        persistent_workers=workers > 0, pin_memory=device.type == "cuda")

    def batches():
        for images, labels in loader:
            labels.to(device, non_blocking=True)
            yield usual_to_device(images, device)
    return Pipeline("webdataset", batches, loader=loader, workers=workers,
                    threads=torch.get_num_threads())


def pack_store(paths, dest):
    """The files packed into a store (their labels as JpegBytes gives them); returns (what the
    pack measured, the opened store). The files were just written: they are in the page cache."""
    t0 = time.perf_counter()
    store = prefetch.pack(paths, dest, labels=[i % CLASSES for i in range(len(paths))],
                          progress=False)
    seconds = time.perf_counter() - t0
    files_bytes = sum(os.path.getsize(p) for p in paths)
    store_bytes = sum(os.path.getsize(os.path.join(dest, f)) for f in os.listdir(dest))
    return {"files": len(paths), "pack_s": seconds, "pack_files_per_s": len(paths) / seconds,
            "files_bytes": files_bytes, "store_bytes": store_bytes,
            "store_overhead": store_bytes / files_bytes - 1.0}, store


def store_pipeline(store, batch_size, device, threads, aug):
    loader = prefetch.ArrayLoader(store, batch_size, shuffle=True, seed=0, device=device,
                                  num_threads=threads, transform=aug)

    def batches():
        for images, _ in loader:
            yield images
    return Pipeline("prefetch_store", batches, prefetcher=loader, threads=threads)


class EnginePipeline(Pipeline):
    """The in-process reference: a Prefetcher over Samples batches made in the main process."""

    def __init__(self, batch_size, image_size, batches, device, threads):
        from .collate import make_samples

        pool = make_samples(2 * batch_size, image_size)  # two alternating groups, as collate does
        groups = [prefetch.Samples(pool[i % 2 * batch_size:(i % 2 + 1) * batch_size])
                  for i in range(batches)]
        pf = prefetch.Prefetcher(groups, device=device, num_threads=threads)
        super().__init__("engine", lambda: iter(pf), prefetcher=pf, threads=threads)
        self.collates = []  # (bytes, seconds) of each epoch's collation, in order

    def epoch(self):
        before = self.prefetcher.stats()
        n = super().epoch()
        after = self.prefetcher.stats()
        self.collates.append((after["bytes_collated"] - before["bytes_collated"],
                              after["collate_s"] - before["collate_s"]))
        return n


class DaliPipeline(Pipeline):
    """NVIDIA DALI's CPU pipeline on the same files: readers.file -> decoders.image_random_crop
    (libjpeg-turbo, only the window decoded) -> resize -> [DALI's trivial_augment_wide, bilinear,
    fill 0, when `trivial_augment`] -> crop_mirror_normalize (random mirror, float CHW), on
    `threads` CPU threads (device_id=None). Needs `pip install nvidia-dali-cuda130` (optional: the
    sections skip this row without it)."""

    def __init__(self, paths, batch_size, size, threads, trivial_augment=False):
        from nvidia.dali import fn, pipeline_def, types

        @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None, seed=0,
                      prefetch_queue_depth=self.QUEUE, enable_conditionals=trivial_augment)
        def pipe():
            jpegs, labels = fn.readers.file(files=paths, labels=[i % CLASSES for i in range(len(paths))],
                                            random_shuffle=True, name="reader")
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                   random_area=(0.08, 1.0),
                                                   random_aspect_ratio=(3 / 4, 4 / 3))
            images = fn.resize(images, resize_x=size, resize_y=size)
            if trivial_augment:  # its automatic augmentations take CPU samples since DALI 1.25
                from nvidia.dali.auto_aug import trivial_augment as ta

                images = ta.trivial_augment_wide(images, fill_value=0,
                                                 interp_type=types.INTERP_LINEAR)
            images = fn.crop_mirror_normalize(
                images, dtype=types.FLOAT, output_layout="CHW", mirror=fn.random.coin_flip(),
                mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD])
            return images, labels

        self._pipe = pipe()
        self._pipe.build()
        self._iterations = -(-len(paths) // batch_size)
        super().__init__("dali_cpu", self._batches_of_epoch, threads=threads)

    # DALI's prefetch_queue_depth, and the batches an epoch schedules ahead of the one it takes.
    # 1: at depth 2 DALI's executor still computed one iteration past an epoch's last scheduled
    # one (a process used 0.13 s of CPU in the 0.1 s after each epoch; none at depth 1).
    QUEUE = 1

    def _batches_of_epoch(self):
        # Each epoch schedules its own batches and no more. run() schedules the next iteration
        # after every batch, so DALI kept computing batches past an epoch's end —
        # during the next pipeline's timed epoch: it stole CPU from the usual pipeline timed after
        # it (827 -> 700 images/s) and started its own epochs with half their 4 batches done
        # (1,050-1,200 images/s interleaved against ~880 alone; benchmarks/NOTES.md, session 16).
        scheduled = 0
        while scheduled < min(self.QUEUE, self._iterations):
            self._pipe.schedule_run()
            scheduled += 1
        for _ in range(self._iterations):
            images, _ = self._pipe.outputs()
            # Into a torch tensor, as DALI's PyTorch iterator copies it (a training step needs one).
            batch = torch.from_numpy(np.array(images.as_tensor()))
            self._pipe.release_outputs()
            if scheduled < self._iterations:
                self._pipe.schedule_run()
                scheduled += 1
            yield batch

    def close(self):
        self._pipe = None
        super().close()


def dali_available():
    try:
        import nvidia.dali  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return False
    return True


class CpuProbe:
    """CPU seconds of the main process (``time.process_time``: all its threads) and of its
    worker processes (:func:`children_cpu_s`) between one ``start`` and the next ``start`` (or
    ``stop``): called from ``timing.interleaved``'s setups, it brackets each timed epoch from
    outside its sample (reading /proc costs milliseconds that no epoch should carry)."""

    def __init__(self):
        self.records = {}  # name -> [(main CPU s, worker CPU s or None)], in call order
        self._open = None

    def start(self, name):
        self.stop()
        kids = children_cpu_s()
        self._open = (name, kids, time.process_time())

    def stop(self):
        if self._open is None:
            return
        name, kids0, cpu0 = self._open
        cpu1 = time.process_time()
        kids1 = children_cpu_s()
        self.records.setdefault(name, []).append(
            (cpu1 - cpu0, None if kids0 is None else kids1 - kids0))
        self._open = None


def interleave(pipelines, repeats, device, progress=None, label="", warmup=1):
    """One untimed epoch of each (``warmup``), then ``repeats`` rounds of one timed epoch of
    each in turn (``timing.interleaved``). Returns per pipeline the lists of every round's
    seconds, images, main-process and worker CPU seconds (and the engine's collation bytes and
    seconds)."""
    probe = CpuProbe()
    images = {p.name: [] for p in pipelines}
    first = pipelines[0].name
    calls_of_first = [0]

    def setup(p):
        def start():
            if progress and p.name == first:
                calls_of_first[0] += 1
                k = calls_of_first[0] - warmup
                progress("workers: %s%s" % (label, "warm-up epochs" if k < 1 else
                                            "round %d/%d" % (k, repeats)))
            probe.start(p.name)
        return start

    def epoch(p):
        return lambda _: images[p.name].append(p.epoch())

    calls = {p.name: (setup(p), epoch(p)) for p in pipelines}
    try:
        seconds = timing.interleaved(calls, repeats, device=device, warmup=warmup)
    finally:
        probe.stop()
    out = {}
    for p in pipelines:
        cpu = probe.records[p.name][warmup:]
        out[p.name] = {"s": seconds[p.name], "images": images[p.name][warmup:],
                       "main_cpu_s": [c for c, _ in cpu], "worker_cpu_s": [k for _, k in cpu],
                       "collate": p.collates[warmup:] if isinstance(p, EnginePipeline) else [],
                       "resources": p.resources}
    return out


def interleave_then_close(pipelines, repeats, device, progress=None, label=""):
    """:func:`interleave`, then every pipeline closed (its workers and Prefetcher gone), whatever
    happened, so the next measurement starts on idle cores."""
    try:
        return interleave(pipelines, repeats, device, progress, label)
    finally:
        for p in pipelines:
            p.close()
        gc.collect()


def _summary(values):
    s = timing.Summary.of(values)
    return {"median": s.median, "low": s.low, "high": s.high}


def summarize(raw, batch_size, image_bytes):
    """Rows per pipeline: images/s and batches/s (median, min, max over rounds), images per
    epoch, CPU microseconds per image in the main process and in the workers (medians)."""
    rows = {}
    for name, rec in raw.items():
        ips = [n / s for n, s in zip(rec["images"], rec["s"])]
        row = {
            "img_per_s": _summary(ips),
            "batches_per_s": _summary([math.ceil(n / batch_size) / s
                                       for n, s in zip(rec["images"], rec["s"])]),
            "gbps": _summary([v * image_bytes / 1e9 for v in ips]),
            "images_per_epoch": rec["images"][0],
            "rounds": {"s": rec["s"], "images": rec["images"]},
            "images_per_epoch_all_equal": len(set(rec["images"])) == 1,
            "main_cpu_us_per_img": timing.median(
                [1e6 * c / n for c, n in zip(rec["main_cpu_s"], rec["images"])]),
            "resources": rec["resources"],
        }
        if rec["worker_cpu_s"] and None not in rec["worker_cpu_s"]:
            row["worker_cpu_us_per_img"] = timing.median(
                [1e6 * c / n for c, n in zip(rec["worker_cpu_s"], rec["images"])])
        if rec["collate"]:
            row["collate_gbps"] = _summary([b / s / 1e9 for b, s in rec["collate"] if s > 0])
        rows[name] = row
    return rows


def ratio(raw, a, b):
    """a's speed over b's, per round (the same round's epochs, back to back): median, min, max."""
    ra, rb = raw[a], raw[b]
    return _summary([(na / sa) / (nb / sb) for na, sa, nb, sb in
                     zip(ra["images"], ra["s"], rb["images"], rb["s"])])


# --- the section -------------------------------------------------------------------------------

# An epoch holds at least this many batches per DataLoader worker (--quick: at least one): with
# fewer batches than workers, workers sit idle and the epoch is one worker's batch, whatever N
# is (the usual pipeline would be given N workers and use a few).
BATCHES_PER_WORKER = 2


def sizes(config):
    """Images per epoch and rounds: small in quick mode (but at least 5 interleaved rounds),
    under ~3 minutes in all on 2 cores."""
    if config.quick:
        return {"synthetic_batches": 2, "jpegs": 2 * jpeg_batch_size(config), "repeats": 5,
                "jpeg_repeats": 5, "batches_per_worker": 1}
    # JPEG epochs are short (~0.3-0.6 s) and many: CPU-bound on every core, they swing most
    # with other load on the machine, and a pair of back-to-back epochs sees the same load.
    return {"synthetic_batches": None, "jpegs": 256, "repeats": 7, "jpeg_repeats": 11,
            "batches_per_worker": BATCHES_PER_WORKER}


def image_size(config):
    """The images' side: ``--image-size``, at most 64 with --quick (a twelfth of 224²'s pixels
    keeps the quick run's every pipeline and round affordable)."""
    return min(config.image_size, 64) if config.quick else config.image_size


def jpeg_batch_size(config):
    """The JPEG pipelines' batch: 64 when it is one of ``--batch-size``, else the smallest; at
    most 32 with --quick."""
    size = 64 if 64 in config.batch_sizes else min(config.batch_sizes)
    return min(size, 32) if config.quick else size


def epoch_batches(batches, workers, per_worker=BATCHES_PER_WORKER):
    """``batches``, raised to ``per_worker`` for each of the ``workers``."""
    return max(batches, per_worker * workers)


def synthetic_images(batch_size, image_size):
    """Images per synthetic epoch at default sizes: ~1,000-2,000 images of 224x224 (at least 4
    batches), scaled by the image's area."""
    per_epoch = max(4 * batch_size, int(1536 * (224 * 224) / (image_size * image_size)))
    return -(-per_epoch // batch_size) * batch_size


def run_synthetic(config, batch_size, n_sizes):
    device, workers, size = config.device, config.workers, image_size(config)
    threads = workers  # N
    batches = epoch_batches(n_sizes["synthetic_batches"]
                            or synthetic_images(batch_size, size) // batch_size, workers,
                            n_sizes["batches_per_worker"])
    n = batches * batch_size
    config.progress("workers: synthetic %d images of %dx%dx3 uint8 per epoch, batch %d, %d workers"
                    % (n, size, size, batch_size, workers))
    pipelines = [
        usual_pipeline("usual", FreshImages(n, size, flip=True), batch_size, workers, device),
        prefetch_pipeline("prefetch", FreshImages(n, size, flip=False), batch_size, workers, device,
                          prefetch.collate.samples, threads),
        prefetch_pipeline("prefetch_default_collate", FreshImages(n, size, flip=False), batch_size,
                          workers, device, default_collate, threads),
        prefetch_pipeline("handoff", FreshImages(n, size, flip=False), batch_size, workers, device,
                          prefetch.collate.samples, threads, transform=False),
        prefetch_pipeline("handoff_stored", StoredImages(4 * n, size, flip=False), batch_size,
                          workers, device, prefetch.collate.samples, threads,
                          transform=False),
        EnginePipeline(batch_size, size, batches, device, threads),
    ]
    raw = interleave_then_close(pipelines, n_sizes["repeats"], device, config.progress,
                                "b%d " % batch_size)
    rows = summarize(raw, batch_size, size * size * 3)
    ratios = {
        "prefetch_vs_usual": ratio(raw, "prefetch", "usual"),
        "prefetch_default_collate_vs_usual": ratio(raw, "prefetch_default_collate", "usual"),
        "prefetch_vs_prefetch_default_collate": ratio(raw, "prefetch", "prefetch_default_collate"),
    }
    handoff = rows["prefetch"]["gbps"]["median"]
    handoff_only = rows["handoff"]["gbps"]["median"]
    handoff_stored = rows["handoff_stored"]["gbps"]["median"]
    engine = rows["engine"]["collate_gbps"]["median"]
    return {"batch_size": batch_size, "image_size": size, "workers": workers, "pipelines": rows,
            "ratios": ratios, "handoff_gbps": handoff, "handoff_only_gbps": handoff_only,
            "engine_collate_gbps": engine, "engine_pipeline_gbps": rows["engine"]["gbps"]["median"],
            "handoff_vs_engine_collate": handoff / engine,
            "handoff_only_vs_engine_collate": handoff_only / engine,
            "handoff_stored_gbps": handoff_stored,
            "handoff_stored_vs_engine_collate": handoff_stored / engine}


def epoch_files(files, batch_size, workers, per_worker=BATCHES_PER_WORKER):
    """One epoch's files: ``files`` repeated (the page cache holds them) up to
    ``epoch_batches`` batches, so that every one of the ``workers`` has batches to make."""
    want = epoch_batches(-(-len(files) // batch_size), workers, per_worker) * batch_size
    return (files * -(-want // len(files)))[:max(want, len(files))]


def run_jpeg(config, batch_size, n_sizes):
    device, workers, size = config.device, config.workers, image_size(config)
    threads = workers  # N
    directory = tempfile.mkdtemp(prefix="prefetch-bench-jpeg-")
    try:
        t0 = time.perf_counter()
        files = write_jpegs(directory, n_sizes["jpegs"], scale=size / 224)
        mean_kb = sum(os.path.getsize(p) for p in files) / len(files) / 1e3
        paths = epoch_files(files, batch_size, workers, n_sizes["batches_per_worker"])
        config.progress("workers: jpeg %d files (%.0f kB on average, written in %.1f s), %d a "
                        "epoch, crop %d, batch %d, N = %d workers / threads"
                        % (len(files), mean_kb, time.perf_counter() - t0, len(paths), size,
                           batch_size, workers))
        profile = stage_profile(files, size)
        pipelines = [
            usual_pipeline("usual", JpegImages(paths, size, "flip"), batch_size, workers, device),
            usual_pipeline("usual_float", JpegImages(paths, size, "float"), batch_size, workers, device,
                           normalize=False),
            prefetch_pipeline("prefetch", JpegImages(paths, size, "uint8"), batch_size, workers,
                              device, prefetch.collate.samples, threads),
            prefetch_pipeline("prefetch_default_collate", JpegImages(paths, size, "uint8"), batch_size,
                              workers, device, default_collate, threads),
            # Workers only decode; the images (of their own sizes) cross as one Ragged and
            # FusedAugment draws each window and resizes it in the same pass as the rest.
            prefetch_pipeline("prefetch_resized", JpegImages(paths, size, "decoded"), batch_size,
                              workers, device, prefetch.collate.samples, threads,
                              aug=prefetch.FusedAugment(MEAN, STD, hflip=0.5, seed=0,
                                                        random_resized_crop=size)),
        ]
        store_info = None
        if prefetch.built_with_jpeg():
            def decoding():
                return prefetch.FusedAugment(MEAN, STD, hflip=0.5, seed=0, random_resized_crop=size,
                                             decode=True)
            # The source reads the files' bytes (no workers: they would only read files);
            # FusedAugment decodes only each window, resizes, flips and normalizes, in C++
            # threads of the main process.
            pipelines.append(prefetch_pipeline(
                "prefetch_decode", JpegBytes(paths), batch_size, 0, device,
                prefetch.collate.samples, threads, aug=decoding()))
            # The same with the files read by DataLoader workers (their bytes cross through
            # shared memory): what a user with a Dataset of bytes writes.
            pipelines.append(prefetch_pipeline(
                "prefetch_decode_workers", JpegBytes(paths), batch_size, workers, device,
                prefetch.collate.samples, threads, aug=decoding()))
            # The files packed once into a store, read by an ArrayLoader: no worker processes,
            # no Python per sample (the engine's threads copy each batch's byte ranges out of
            # the memmap).
            store_info, store = pack_store(paths, os.path.join(directory, "store"))
            pipelines.append(store_pipeline(store, batch_size, device, threads, decoding()))
        webdataset_skipped = None
        if webdataset_available():  # a peer's store: tar shards, optional (pip install webdataset)
            pipelines.append(webdataset_pipeline(paths, directory, batch_size, workers, device, size))
        else:
            webdataset_skipped = "webdataset is not installed (pip install webdataset)"
        dali_skipped = None
        if not dali_available():
            dali_skipped = "DALI is not installed (pip install nvidia-dali-cuda130)"
        elif device.type != "cpu":
            dali_skipped = "DALI's row is its CPU pipeline, run when the bench's device is the CPU"
        else:
            try:
                pipelines.append(DaliPipeline(paths, batch_size, size, threads))
            except Exception as e:  # noqa: BLE001 - an optional peer that cannot run here
                # (e.g. its codec library fails to load): the row is skipped, saying why.
                dali_skipped = "DALI could not build its pipeline: %s" % str(e).splitlines()[0][:200]
                config.progress("workers: jpeg: dali_cpu skipped (%s)" % dali_skipped)
        crop_impl = pipelines[0].loader.dataset.crop_impl
        raw = interleave_then_close(pipelines, n_sizes["jpeg_repeats"], device, config.progress,
                                    "jpeg ")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    rows = summarize(raw, batch_size, size * size * 3)
    ratios = {
        "prefetch_vs_usual": ratio(raw, "prefetch", "usual"),
        "prefetch_default_collate_vs_usual": ratio(raw, "prefetch_default_collate", "usual"),
        "prefetch_vs_usual_float": ratio(raw, "prefetch", "usual_float"),
        "prefetch_resized_vs_usual": ratio(raw, "prefetch_resized", "usual"),
        "usual_float_vs_usual": ratio(raw, "usual_float", "usual"),
    }
    for name in ("prefetch_decode", "prefetch_decode_workers", "prefetch_store", "dali_cpu"):
        if name in raw:
            ratios["%s_vs_usual" % name] = ratio(raw, name, "usual")
    for a, b in (("prefetch_decode", "dali_cpu"), ("prefetch_store", "dali_cpu"),
                 ("prefetch_store", "webdataset"), ("webdataset", "usual"),
                 ("prefetch_store", "prefetch_decode_workers"), ("prefetch_store", "prefetch_decode")):
        if a in raw and b in raw:
            ratios["%s_vs_%s" % (a, b)] = ratio(raw, a, b)
    stages = profile["us_per_image"]
    worker_total = profile["worker_us_per_image"]["prefetch"]
    return {"batch_size": batch_size, "image_size": size, "workers": workers, "files": len(paths),
            "distinct_files": len(files), "mean_file_kb": mean_kb, "crop": crop_impl,
            "pipelines": rows, "ratios": ratios,
            "dali_skipped": dali_skipped, "webdataset_skipped": webdataset_skipped,
            "store": store_info,
            "stage_us_per_image": stages, "worker_us_per_image": profile["worker_us_per_image"],
            "prefetch_worker_shares": {k: stages[k] / worker_total
                                       for k in ("decode", "crop_resize", "to_tensor")}}


def slower_reason(config):
    """Why a prefetch pipeline can trail in this run (the figures are whole epochs on shared
    cores)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = config.get("loadavg") or [None, None]
    why = ("on a CPU the main process (the consumer, the engine's threads, a decode on its "
           "threads) and the %d workers share the same %d cores" % (config["workers"], cores or 0))
    if config.get("device", "cpu").startswith("cuda"):
        why = "the main process's threads and the %d workers share %d cores" % (config["workers"], cores or 0)
    if None not in load:
        why += "; the load average was %.1f-%.1f, so other work took cycles too" % tuple(load)
    return why


def table(result):
    load = result["config"]["loadavg"]
    lines = [] if None in load else [
        "", "workers: load average %.1f before, %.1f after (other work on the machine)" % tuple(load)]
    if result["jpeg"] is None:
        lines += ["", "workers: jpeg skipped: %s" % result["jpeg_skipped"]]
    for part in result["synthetic"] + ([result["jpeg"]] if result["jpeg"] is not None else []):
        jpeg = part is result["jpeg"]
        title = ("jpeg (%d files an epoch, of %d distinct, %.0f kB, PIL decode + RandomResizedCrop "
                 "%d [%s])" % (part["files"], part["distinct_files"], part["mean_file_kb"],
                               part["image_size"], part["crop"]) if jpeg else
                 "synthetic %dx%dx3 uint8" % (part["image_size"], part["image_size"]))
        lines += ["", "workers: %s, batch %d, N = %d workers / threads; images/s: median (range) of "
                  "interleaved rounds" % (title, part["batch_size"], part["workers"]),
                  "  pipeline                 | images/s median (range) | batches/s | main CPU us/img"
                  " | worker CPU us/img"]
        for name, r in part["pipelines"].items():
            ips = r["img_per_s"]
            worker = r.get("worker_cpu_us_per_img")
            lines.append("  %-24s | %7.0f (%7.0f–%7.0f) | %9.1f | %15.0f | %17s" % (
                name, ips["median"], ips["low"], ips["high"], r["batches_per_s"]["median"],
                r["main_cpu_us_per_img"], "-" if worker is None else "%.0f" % worker))
        lines.append("  ratios, a_vs_b = a's images/s / b's (median (range) of per-round ratios; "
                     "above 1: a is faster):")
        slower = []
        for name, s in part["ratios"].items():
            lines.append("  %-40s %5.2fx (%.2f–%.2f)" % (name, s["median"], s["low"], s["high"]))
            if name.startswith("prefetch") and s["median"] < 1:
                slower.append(name)
        if slower:
            lines.append("  %s below 1: %s" % (", ".join(slower), slower_reason(result["config"])))
        if jpeg:
            us = part["stage_us_per_image"]
            lines.append("  one worker, us/img: " + ", ".join("%s %.0f" % kv for kv in us.items()))
            st = part.get("store")
            if st:
                lines.append("  store: %d files packed in %.2f s (%.0f files/s, from the page "
                             "cache), %.0f kB for %.0f kB of files (%+.2f%%)" % (
                                 st["files"], st["pack_s"], st["pack_files_per_s"],
                                 st["store_bytes"] / 1e3, st["files_bytes"] / 1e3,
                                 100 * st["store_overhead"]))
        else:
            lines.append("  hand-off %.2f GB/s (prefetch run), %.2f GB/s (no transform), %.2f GB/s "
                         "(no transform, samples in memory); the engine's in-process collation "
                         "%.2f GB/s; hand-off / in-process collation: %.2f, %.2f, %.2f" % (
                             part["handoff_gbps"], part["handoff_only_gbps"],
                             part["handoff_stored_gbps"], part["engine_collate_gbps"],
                             part["handoff_vs_engine_collate"], part["handoff_only_vs_engine_collate"],
                             part["handoff_stored_vs_engine_collate"]))
    return "\n".join(lines)


def metrics(result):
    m = {}
    for part in result["synthetic"]:
        b = part["batch_size"]
        for name, s in part["ratios"].items():
            m["%s_b%d" % (name, b)] = s["median"]
        m["workers_prefetch_img_per_s_b%d" % b] = part["pipelines"]["prefetch"]["img_per_s"]["median"]
        m["workers_usual_img_per_s_b%d" % b] = part["pipelines"]["usual"]["img_per_s"]["median"]
        m["handoff_gbps_b%d" % b] = part["handoff_gbps"]
        m["engine_collate_gbps_b%d" % b] = part["engine_collate_gbps"]
        m["handoff_vs_engine_collate_b%d" % b] = part["handoff_vs_engine_collate"]
        m["handoff_only_gbps_b%d" % b] = part["handoff_only_gbps"]
        m["handoff_only_vs_engine_collate_b%d" % b] = part["handoff_only_vs_engine_collate"]
        m["handoff_stored_gbps_b%d" % b] = part["handoff_stored_gbps"]
        m["handoff_stored_vs_engine_collate_b%d" % b] = part["handoff_stored_vs_engine_collate"]
    if result["jpeg"] is None:
        return m
    for name, s in result["jpeg"]["ratios"].items():
        m["jpeg_%s" % name] = s["median"]
    m["jpeg_prefetch_img_per_s"] = result["jpeg"]["pipelines"]["prefetch"]["img_per_s"]["median"]
    if result["jpeg"].get("store"):
        m["jpeg_store_pack_files_per_s"] = result["jpeg"]["store"]["pack_files_per_s"]
        m["jpeg_store_overhead"] = result["jpeg"]["store"]["store_overhead"]
    return m


def run(config):
    n_sizes = sizes(config)
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    result = {"synthetic": [run_synthetic(config, b, n_sizes) for b in config.batch_sizes]}
    try:
        import PIL  # noqa: F401 - the JPEG pipelines decode with Pillow
    except ImportError:
        result["jpeg"] = None
        result["jpeg_skipped"] = "Pillow is not installed (pip install pillow, or the [bench] extra)"
    else:
        result["jpeg"] = run_jpeg(config, jpeg_batch_size(config), n_sizes)
    result["config"] = {"workers": config.workers, "repeats": n_sizes["repeats"],
                        "jpeg_repeats": n_sizes["jpeg_repeats"],
                        "device": str(config.device), "threads": config.workers,
                        "batches_per_worker": n_sizes["batches_per_worker"],
                        # 1-minute load average before and after: other work on the machine
                        "loadavg": [load_before and load_before[0],
                                    os.getloadavg()[0] if load_before else None],
                        "ratio": "median (min-max) of per-round ratios; a round is one epoch of "
                                 "each pipeline, back to back"}
    # The optional peers' rows that did not run, and why (absent keys are never placeholders).
    skipped = {}
    if result["jpeg"] is not None:
        for peer in ("webdataset", "dali"):
            why = result["jpeg"].get("%s_skipped" % peer)
            if why:
                skipped["jpeg %s" % ("dali_cpu" if peer == "dali" else peer)] = why
    return SectionResult(result, metrics(result), table(result), resources=used_resources(result),
                         skipped=skipped)


def used_resources(result):
    """results.json's resources of the section: ``synthetic bN: name`` and ``jpeg: name``."""
    parts = [("synthetic b%d" % p["batch_size"], p) for p in result["synthetic"]]
    if result["jpeg"] is not None:
        parts.append(("jpeg", result["jpeg"]))
    return {"%s: %s" % (label, name): row["resources"]
            for label, part in parts for name, row in part["pipelines"].items()}


SECTION = Section("workers", "whole epochs with DataLoader workers (synthetic uint8 and PIL JPEG): "
                             "the usual pipeline vs Prefetcher + FusedAugment, interleaved", run)
