"""Ray Data as a Prefetcher source (optional extra: ``pip install 'ray[data]'``).

Decoding and heavy per-sample CPU work scale out over a Ray cluster (``Dataset.map_batches``);
collation into the pinned ring, the copy and the augmentation on the GPU stay in prefetch:

    ds = ray.data.read_images("s3://bucket/train").map_batches(decode_and_resize)
    for batch in prefetch.Prefetcher(ds, transform=aug):          # batches of 256 rows
        ...
    # or, to choose the batching and shuffling:
    source = prefetch.ray.RaySource(ds, batch_size=512, local_shuffle_buffer_size=10_000)

A Ray ``Dataset`` (or a ``DataIterator``, e.g. one of ``ds.streaming_split(world_size)`` per DDP
rank) is consumed through ``iter_batches(batch_format="numpy")``: each batch is a dict of column
name to ndarray, which the Prefetcher copies as it copies any dict of arrays. Nothing here
imports Ray: the dataset brings it, and ``import prefetch`` stays free of it.
"""

__all__ = ["RaySource", "is_ray_dataset"]


def is_ray_dataset(obj):
    """True for a Ray Data ``Dataset`` or ``DataIterator``, recognised without importing Ray."""
    module = type(obj).__module__ or ""
    return module.startswith("ray.data") and callable(getattr(obj, "iter_batches", None))


class RaySource:
    """Iterates ``dataset.iter_batches(batch_format="numpy", ...)`` once per epoch.

    Args:
        dataset: a Ray ``Dataset`` or ``DataIterator``.
        batch_size: rows per batch (Ray's default is 256).
        drop_last: drop a partial last batch.
        columns: keep only these columns (e.g. drop string columns, which cannot go to a device).
        **iter_kwargs: passed to ``iter_batches`` (``local_shuffle_buffer_size``,
            ``local_shuffle_seed``, ``prefetch_batches``, ...).
    """

    def __init__(self, dataset, batch_size=256, *, drop_last=False, columns=None, **iter_kwargs):
        if not is_ray_dataset(dataset):
            raise TypeError("prefetch: RaySource needs a Ray Dataset or DataIterator, got %s"
                            % type(dataset).__name__)
        if "batch_format" in iter_kwargs and iter_kwargs["batch_format"] != "numpy":
            raise ValueError("prefetch: RaySource reads numpy batches; batch_format=%r is not "
                             "supported" % (iter_kwargs["batch_format"],))
        iter_kwargs.pop("batch_format", None)
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.columns = list(columns) if columns is not None else None
        self.iter_kwargs = iter_kwargs

    def __iter__(self):
        for batch in self.dataset.iter_batches(batch_size=self.batch_size, batch_format="numpy",
                                               drop_last=self.drop_last, **self.iter_kwargs):
            if self.columns is not None:
                missing = [c for c in self.columns if c not in batch]
                if missing:
                    raise KeyError("prefetch: the Ray batch has no column(s) %s; it has %s"
                                   % (missing, sorted(batch)))
                batch = {c: batch[c] for c in self.columns}
            yield batch

    def __repr__(self):
        return "RaySource(%s, batch_size=%s)" % (type(self.dataset).__name__, self.batch_size)
