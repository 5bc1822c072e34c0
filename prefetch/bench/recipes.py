"""The ``recipes`` section: torchvision's ResNet-50 "v2" training recipe from JPEG files to
normalized float batches, as users run it and through ``prefetch.transforms.v2`` (the goal:
≥ 2.5× the usual way).

Every pipeline gets N (``--workers``): the usual pipeline N DataLoader workers, prefetch and DALI
N threads; an epoch holds at least two batches per worker (--quick: one), the files repeated to
fill it.

- ``usual``: DataLoader workers, each PIL-decodes a file and applies RandomResizedCrop(176),
  RandomHorizontalFlip and TrivialAugmentWide(bilinear) to the PIL image — torchvision's own
  transforms when torchvision imports, else the same algorithms written here with PIL (the calls
  torchvision's PIL backend makes: ``Image.transform``/``rotate`` for the geometry,
  ``ImageEnhance`` and ``ImageOps`` for the rest) — then ``default_collate`` and ToDtype +
  Normalize in the main process.
- ``dali_cpu`` (when ``nvidia-dali-cuda130`` is installed and the device is the CPU): DALI's CPU
  pipeline on the same files with its own ``trivial_augment_wide`` (bilinear, fill 0) between the
  resize and the normalisation, on as many threads as prefetch's.
- ``prefetch``: a dataset of the files' bytes, no workers, and
  ``T.Compose([RandomResizedCrop(176), RandomHorizontalFlip(), TrivialAugmentWide(bilinear),
  ToDtype(float32, scale=True), Normalize(...)], decode=True)``: each window decoded and resampled
  in C++ threads, the policy per sample.
- ``prefetch_store``: the same files packed once into a store (``prefetch.pack``) and the same
  Compose as the ``ArrayLoader``'s transform: each batch's bytes gathered in C++, no Python per
  sample (the ``prefetch`` row's dataset, DataLoader and collation run per sample).

RandomErasing(0.1) and MixUp/CutMix, the recipe's batch-level steps, are left out on both sides
(a few percent of the work either way). Interleaved rounds (``timing.interleaved``, at least 5
after a warm-up epoch); the ratio is the median of per-round ratios.
"""
import os
import shutil
import tempfile

import torch

import prefetch

from .constants import CLASSES, MEAN, STD
from .datasets import JpegBytes, pack_store, random_resized_crop, to_hwc_tensor, write_jpegs
from .epochs import BATCHES_PER_WORKER, epoch_files, interleave_then_close, ratio, summarize
from .pipelines import DaliPipeline, dali_available, prefetch_pipeline, store_pipeline, usual_pipeline
from .section import Section, SectionResult, Skipped

SIZE = 176  # the recipe's train crop


def _torchvision_trivial_augment():
    try:
        from torchvision.transforms import InterpolationMode, TrivialAugmentWide
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return None
    return TrivialAugmentWide(interpolation=InterpolationMode.BILINEAR)


class PilTrivialAugmentWide:
    """TrivialAugmentWide on a PIL image with the calls torchvision's PIL backend makes, its op
    space and magnitudes drawn by :func:`prefetch.transforms.policies.trivial_augment_wide` from
    torch's global generator (as torchvision draws)."""

    def __call__(self, img):
        from PIL import Image, ImageEnhance, ImageOps

        from ..transforms.policies import OPS, trivial_augment_wide

        table = trivial_augment_wide(1, None, height=img.height, width=img.width)
        op, mag = OPS[int(table.ops[0, 0])], float(table.magnitudes[0, 0])
        bilinear = Image.BILINEAR
        if op == "ShearX":
            return img.transform(img.size, Image.AFFINE, (1, mag, 0, 0, 1, 0), bilinear)
        if op == "ShearY":
            return img.transform(img.size, Image.AFFINE, (1, 0, 0, mag, 1, 0), bilinear)
        if op == "TranslateX":
            return img.transform(img.size, Image.AFFINE, (1, 0, -mag, 0, 1, 0), bilinear)
        if op == "TranslateY":
            return img.transform(img.size, Image.AFFINE, (1, 0, 0, 0, 1, -mag), bilinear)
        if op == "Rotate":
            return img.rotate(mag, bilinear)
        enhancers = {"Brightness": ImageEnhance.Brightness, "Color": ImageEnhance.Color,
                     "Contrast": ImageEnhance.Contrast, "Sharpness": ImageEnhance.Sharpness}
        if op in enhancers:
            return enhancers[op](img).enhance(1.0 + mag)
        if op == "Posterize":
            return ImageOps.posterize(img, int(mag))
        if op == "Solarize":  # the table's magnitude is a fraction of the largest value
            return ImageOps.solarize(img, 255.0 * mag)
        if op == "AutoContrast":
            return ImageOps.autocontrast(img)
        if op == "Equalize":
            return ImageOps.equalize(img)
        return img  # Identity


class RecipeInWorkers(JpegBytes):
    """What users write: PIL decode and the recipe's per-sample transforms in the worker; HWC
    uint8 out (ToDtype and Normalize come in the main process)."""

    def __init__(self, paths):
        super().__init__(paths)
        self.crop, crop_impl = random_resized_crop(SIZE)
        policy = _torchvision_trivial_augment()
        self.policy = policy if policy is not None else PilTrivialAugmentWide()
        self.impl = "torchvision" if policy is not None and crop_impl == "torchvision" else "pil"

    def __getitem__(self, i):
        from PIL import Image

        with Image.open(self.paths[i]) as f:
            img = f.convert("RGB")
        img = self.crop(img)
        if torch.rand(1).item() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        return to_hwc_tensor(self.policy(img)), i % CLASSES


def _recipe(decode):
    from ..transforms import v2 as T

    return T.Compose([T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip(),
                      T.TrivialAugmentWide(interpolation=T.InterpolationMode.BILINEAR),
                      T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)],
                     seed=0, decode=decode)


def run(config):
    if not prefetch.built_with_jpeg():
        raise Skipped("prefetch was built without its JPEG decoder (PREFETCH_JPEG=1)")
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise Skipped("Pillow is not installed: the usual pipeline decodes with it") from None
    # quick: smaller files (a quarter of the pixels), smaller batches, 5 rounds all the same
    files, rounds, batch_size, scale = (32, 5, 16, 0.5) if config.quick else (256, 5, 64, 1.0)
    workers = threads = config.workers  # N
    device = config.device
    directory = tempfile.mkdtemp(prefix="prefetch-bench-recipes-")
    try:
        paths = epoch_files(write_jpegs(directory, files, scale=scale), batch_size, workers,
                            1 if config.quick else BATCHES_PER_WORKER)
        config.progress("recipes: %d files, %d an epoch, ResNet-50 v2 recipe (crop %d, "
                        "TrivialAugmentWide), batch %d, N = %d workers / threads"
                        % (files, len(paths), SIZE, batch_size, workers))
        usual_ds = RecipeInWorkers(paths)
        pipelines = [
            usual_pipeline("usual", usual_ds, batch_size, workers, device),
            prefetch_pipeline("prefetch", JpegBytes(paths), batch_size, 0, device,
                              prefetch.collate.samples, threads, aug=_recipe(decode=True)),
        ]
        # The same files packed once (prefetch.pack): the ArrayLoader gathers each batch's bytes
        # in C++, no Python per sample (the bytes path's dataset, DataLoader and collation are).
        _, store = pack_store(paths, os.path.join(directory, "store"))
        pipelines.append(store_pipeline(store, batch_size, device, threads,
                                        _recipe(decode=True)))
        dali_skipped = None if dali_available() and device.type == "cpu" else \
            "DALI is not installed (pip install nvidia-dali-cuda130) or the device is not the CPU"
        if dali_skipped is None:
            try:
                pipelines.append(DaliPipeline(paths, batch_size, SIZE, threads,
                                              trivial_augment=True))
            except Exception as e:  # noqa: BLE001 - an optional peer that cannot run here
                dali_skipped = "DALI could not build its pipeline: %s" % str(e).splitlines()[0][:200]
                config.progress("recipes: dali_cpu skipped (%s)" % dali_skipped)
        raw = interleave_then_close(pipelines, rounds, device, config.progress, "recipes ")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    rows = summarize(raw, batch_size, SIZE * SIZE * 3)
    vs_usual = ratio(raw, "prefetch", "usual")
    store_vs_usual = ratio(raw, "prefetch_store", "usual")
    ratios = {"prefetch_vs_usual": vs_usual, "prefetch_store_vs_usual": store_vs_usual}
    if "dali_cpu" in raw:
        ratios["prefetch_vs_dali_cpu"] = ratio(raw, "prefetch", "dali_cpu")
        ratios["dali_cpu_vs_usual"] = ratio(raw, "dali_cpu", "usual")
    result = {"batch_size": batch_size, "image_size": SIZE, "workers": workers, "threads": threads,
              "files": len(paths), "distinct_files": files, "rounds": rounds, "usual_transforms": usual_ds.impl, "pipelines": rows,
              "ratios": ratios, "dali_skipped": dali_skipped}
    metrics = {"recipe_prefetch_vs_usual": vs_usual["median"],
               "recipe_prefetch_img_per_s": rows["prefetch"]["img_per_s"]["median"],
               "recipe_usual_img_per_s": rows["usual"]["img_per_s"]["median"],
               "recipe_prefetch_store_vs_usual": store_vs_usual["median"]}
    if "dali_cpu" in raw:
        metrics["recipe_prefetch_vs_dali_cpu"] = ratios["prefetch_vs_dali_cpu"]["median"]
    table = ("ResNet-50 v2 recipe, JPEG files to normalized float batches (N = %d workers / "
             "threads; images/s, median (range) of %d interleaved rounds; the usual pipeline's "
             "transforms: %s):\n"
             "  usual    %8.0f  (%.0f-%.0f)\n  prefetch %8.0f  (%.0f-%.0f)\n"
             "  prefetch / usual %.2fx (%.2f-%.2f)" % (
                 workers, rounds, usual_ds.impl, rows["usual"]["img_per_s"]["median"],
                 rows["usual"]["img_per_s"]["low"], rows["usual"]["img_per_s"]["high"],
                 rows["prefetch"]["img_per_s"]["median"], rows["prefetch"]["img_per_s"]["low"],
                 rows["prefetch"]["img_per_s"]["high"], vs_usual["median"], vs_usual["low"],
                 vs_usual["high"]))
    st = rows["prefetch_store"]["img_per_s"]
    table += ("\n  prefetch_store %.0f  (%.0f-%.0f)  the files packed once, ArrayLoader over the store\n"
              "  prefetch_store / usual %.2fx (%.2f-%.2f)" % (
                  st["median"], st["low"], st["high"], store_vs_usual["median"],
                  store_vs_usual["low"], store_vs_usual["high"]))
    if "dali_cpu" in raw:
        d, r = rows["dali_cpu"]["img_per_s"], ratios["prefetch_vs_dali_cpu"]
        table += ("\n  dali_cpu %8.0f  (%.0f-%.0f)  DALI's CPU pipeline with its trivial_augment_wide\n"
                  "  prefetch / dali_cpu %.2fx (%.2f-%.2f)" % (d["median"], d["low"], d["high"],
                                                              r["median"], r["low"], r["high"]))
    elif dali_skipped:
        table += "\n  (dali_cpu: %s)" % dali_skipped
    return SectionResult(rows=result, metrics=metrics, table=table,
                         resources={name: row["resources"] for name, row in rows.items()})


SECTION = Section("recipes", "torchvision's ResNet-50 v2 recipe, JPEGs to float batches: usual "
                  "(workers, PIL) vs prefetch.transforms.v2 with decode=True", run)
