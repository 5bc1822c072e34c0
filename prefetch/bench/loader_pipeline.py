"""What the verdict's advice must fit, read off the user's loader: its workers, the usable cores,
the training process's torch threads, and whether its Dataset decodes with PIL.

PIL is detected by watching one sample being made: the Dataset's ``__getitem__`` (or an
IterableDataset's first item) runs once in this process under ``sys.setprofile``, and every call
into a ``PIL`` module is recorded with the first caller outside PIL. A call of
``PIL.ImageFile.ImageFile.load`` is the decode itself (``Image.open`` only reads the header;
``convert``, ``resize``, ``np.asarray`` and torchvision's ``PILToTensor`` all go through
``load``); a sample that holds a ``PIL.Image.Image`` counts too (it is decoded later). This sees
what the sample's code actually runs — through ``Subset``, ``ConcatDataset``, torchvision's
``ImageFolder`` and transform objects, the user's own classes — where reading a ``transform``
attribute would see only the datasets that name theirs so, and it costs one sample. A Dataset
that fails on that sample is reported as not seen; the timed passes then say what is wrong.
"""
import os
import sys

import torch

import prefetch

from .verdict import Pipeline


def usable_cores():
    """The cores this process may run on (``os.sched_getaffinity``; the CPU count elsewhere)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _caller(frame):
    """'Module.function' of the first frame above ``frame`` outside PIL."""
    while frame is not None and frame.f_globals.get("__name__", "").startswith("PIL."):
        frame = frame.f_back
    if frame is None:
        return "?"
    code = frame.f_code
    return getattr(code, "co_qualname", code.co_name)


def _holds_pil_image(obj, depth=0):
    if depth > 3:
        return False
    cls = type(obj)
    if cls.__module__.startswith("PIL.") and any(b.__name__ == "Image" for b in cls.__mro__):
        return True
    if isinstance(obj, (list, tuple)):
        return any(_holds_pil_image(o, depth + 1) for o in obj[:8])
    if isinstance(obj, dict):
        return any(_holds_pil_image(o, depth + 1) for o in list(obj.values())[:8])
    return False


def watch_pil(make_sample):
    """Where ``make_sample()`` decodes with PIL ('PIL.ImageFile.load from Images.__getitem__'),
    or None when it does not (or raises)."""
    seen = []

    def profile(frame, event, arg):
        if event == "call" and not seen:
            module = frame.f_globals.get("__name__", "")
            if module == "PIL.ImageFile" and frame.f_code.co_name == "load":
                seen.append("PIL.ImageFile.load from %s" % _caller(frame))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        sample = make_sample()
    except Exception:  # noqa: BLE001 - the timed passes report a failing Dataset, not the probe
        return None
    finally:
        sys.setprofile(previous)
    if seen:
        return seen[0]
    if _holds_pil_image(sample):
        return "the samples are PIL images (decoded when first used)"
    return None


def _first_sample(loader):
    """A function making the loader's first sample in this process, or None when the loader is
    not a DataLoader (its batches are made by code the harness cannot take a sample from)."""
    if not isinstance(loader, torch.utils.data.DataLoader):
        return None
    dataset = loader.dataset
    if isinstance(dataset, torch.utils.data.IterableDataset):
        return lambda: next(iter(dataset))
    sampler = loader.sampler
    if isinstance(sampler, (torch.utils.data.SequentialSampler, torch.utils.data.RandomSampler)):
        return lambda: dataset[0]  # the index every map-style Dataset of length > 0 has
    if loader.batch_sampler is not None:
        return lambda: dataset[next(iter(loader.batch_sampler))[0]]
    return lambda: dataset[next(iter(sampler))]


def describe(loader, device, *, uses=(), loop="plain", seconds=2.0, probe=True):
    """The :class:`~prefetch.bench.verdict.Pipeline` of ``loader`` measured on ``device``;
    ``probe=False`` skips taking a sample (PIL then not seen)."""
    make = _first_sample(loader) if probe else None
    return Pipeline(
        device=torch.device(device).type,
        loader=type(loader).__name__,
        workers=loader.num_workers if isinstance(loader, torch.utils.data.DataLoader) else None,
        own_threads=isinstance(loader, (prefetch.Prefetcher, prefetch.ArrayLoader)),
        cores=usable_cores(),
        threads=torch.get_num_threads(),
        pil=watch_pil(make) if make is not None else None,
        uses=tuple(uses), loop=loop, seconds=seconds)


def describe_line(p):
    """'the pipeline: DataLoader with 2 workers, 2 usable cores, 2 torch threads, cpu; the Dataset
    decodes with PIL (PIL.ImageFile.load from Images.__getitem__)'."""
    workers = ("with %d worker%s" % (p.workers, "" if p.workers == 1 else "s")
               if p.workers is not None else "(batches made on threads of its own)"
               if p.own_threads else "(batches made in the training loop's thread)")
    line = "the pipeline: %s %s, %d usable cores, %d torch threads, step on %s" % (
        p.loader, workers, p.cores, p.threads, p.device)
    if p.pil:
        line += "; the Dataset decodes with PIL (%s)" % p.pil
    return line
