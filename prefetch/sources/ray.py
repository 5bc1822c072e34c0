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
name to ndarray, which the Prefetcher copies as it copies any dict of arrays. Columns that are not
numeric arrays are made into what a Prefetcher carries (see :class:`RaySource`): strings arrive as
lists of ``str``. Nothing here imports Ray: the dataset brings it, and ``import prefetch`` stays
free of it.
"""
import sys
import typing

import numpy as np

from .._core.errors import CollateError

__all__ = ["RaySource", "is_ray_dataset"]


def is_ray_dataset(obj):
    """True for a Ray Data ``Dataset`` or ``DataIterator``. Imports no Ray: if ``ray.data`` was never
    imported, no object can be one."""
    ray_data = sys.modules.get("ray.data")
    if ray_data is None:
        return False
    kinds = tuple(k for k in (getattr(ray_data, "Dataset", None), getattr(ray_data, "DataIterator", None))
                  if isinstance(k, type))
    return bool(kinds) and isinstance(obj, kinds)


def _array_rows(label, shape, rows, batch):
    """An object column whose rows are numeric arrays (Ray's variable-shaped tensor columns,
    list columns): stacked into one array when every row has one shape and dtype, refused
    otherwise with the column, the two samples and the fix."""
    first = rows[0]
    for i, row in enumerate(rows):
        if not isinstance(row, np.ndarray):
            raise CollateError(
                "prefetch: Ray column %s holds arrays, but sample %d is a %s (sample 0 is an "
                "ndarray of shape %s); give every row an array of one shape in map_batches, or "
                "leave the column out with RaySource(ds, columns=[...])"
                % (label, i, type(row).__name__, tuple(first.shape)))
        if row.shape != first.shape or row.dtype != first.dtype:
            where = ""
            paths = batch.get("path")
            if isinstance(paths, np.ndarray) and paths.shape == shape == (len(rows),):
                where = " (paths %r and %r)" % (paths[0], paths[i])
            what = "different shapes" if row.shape != first.shape else "different dtypes"
            raise CollateError(
                "prefetch: Ray column %s holds arrays of %s: sample 0 is %s %s but sample %d is "
                "%s %s%s, and one batch tensor needs one shape and dtype. Resize (or cast) them "
                "in the dataset, e.g. ray.data.read_images(..., size=(H, W)) or a resize in "
                "ds.map_batches(fn); or leave the column out with RaySource(ds, columns=[...])"
                % (label, what, tuple(first.shape), first.dtype, i, tuple(row.shape), row.dtype,
                   where))
    return np.stack(rows).reshape(shape + first.shape)


def _convert(label, values, batch):
    if values.dtype.kind in "US":
        return values.tolist()
    if values.dtype.kind in "mM":  # Ray's timestamp and duration columns: no tensor dtype
        raise CollateError(
            "prefetch: Ray column %s is a numpy array of dtype %s, which has no tensor dtype; "
            "convert it in ds.map_batches(fn), e.g. to integers with .astype(np.int64) (units of "
            "%s), or leave the column out with RaySource(ds, columns=[...])"
            % (label, values.dtype, np.datetime_data(values.dtype)[0]))
    if not values.dtype.hasobject:
        return values
    # Rows that are arrays themselves (list columns, nested lists, lists of str) first.
    rows = [_convert("%s row %d" % (label, i), v, batch) if isinstance(v, np.ndarray) else v
            for i, v in enumerate(values.flat)]
    if any(isinstance(v, np.ndarray) for v in rows):  # numeric rows: one tensor, or a clear error
        return _array_rows(label, values.shape, rows, batch)
    out = np.empty(len(rows), dtype=object)  # strings, None, dicts, lists of str: a (nested) list
    for i, row in enumerate(rows):  # one by one: numpy would read equal-length lists as a dim
        out[i] = row
    return out.reshape(values.shape).tolist()


def _column(name, values, batch):
    """One column of a Ray numpy batch as a Prefetcher carries it: numeric arrays as they are;
    strings (``<U``, ``S``, or objects) as (nested) lists of str/bytes; an object column whose
    rows are numeric arrays of one shape and dtype (list columns, nested lists) stacked; any
    other object column as a list of its rows (lists of str, None, dicts) as Python objects."""
    if not isinstance(values, np.ndarray):
        return values
    return _convert(repr(name), values, batch)


def _numpy_batch(batch):
    return {name: _column(name, values, batch) for name, values in batch.items()}


class RaySource:
    """Iterates ``dataset.iter_batches(batch_format="numpy", ...)`` once per epoch.

    Each batch is a dict of column name to: the column's ndarray when it is numeric or bool (a
    tensor on the device after the Prefetcher); a ``list`` of ``str`` (or ``bytes``) for a string
    column, row for row, where plain ``iter_batches`` gives an ndarray of dtype object or ``<U``
    (strings pass through a Prefetcher unchanged, as ``default_collate`` gives them); a stacked
    array for an object column whose rows are numeric ndarrays of one shape and dtype (a list
    column, nested lists); and a ``list`` of the rows as Python objects for any other object
    column (lists of str as lists, dicts, ``None`` mixed with strings). A column whose rows are
    arrays of different shapes (e.g. ``read_images`` of images of different sizes) raises
    :class:`prefetch.CollateError` naming the column and the fix: resize in ``map_batches`` (or
    ``read_images(size=...)``), or ``columns=`` without it; so does a timestamp column
    (``datetime64``: cast it in ``map_batches``).

    Args:
        dataset: a Ray ``Dataset`` or ``DataIterator``.
        batch_size: rows per batch (Ray's default is 256).
        drop_last: drop a partial last batch.
        columns: keep only these columns.
        resumable: give the source ``state_dict()`` / ``load_state_dict()``, so that a
            Prefetcher over it saves and resumes its position (mid-epoch, at an epoch's end) as
            over a ``StatefulDataLoader``. Ray Data cannot seek: a resumed epoch reads its first
            batches again and drops them, so the resume is exact only when the dataset yields the
            same batches in the same order every time it is read — which this requires of what it
            can see: a ``Dataset`` (not a ``DataIterator``: ``streaming_split``'s shares follow the
            scheduling) whose ``context.execution_options.preserve_order`` is True (Ray's default
            lets blocks arrive in the order they finish), and a ``local_shuffle_seed`` with a
            ``local_shuffle_buffer_size``; a ``random_shuffle`` in the dataset needs its ``seed``
            (which cannot be seen here). Anything else raises ``ValueError`` naming what to set.
        **iter_kwargs: passed to ``iter_batches`` (``local_shuffle_buffer_size``,
            ``local_shuffle_seed``, ``prefetch_batches``, ...).

    Raises:
        TypeError: ``dataset`` neither a Ray ``Dataset`` nor a ``DataIterator``.
        ValueError: a ``batch_format`` other than ``"numpy"`` in ``iter_kwargs``; with
            ``resumable``, a dataset whose order cannot be reproduced (the message names what to
            set).
        KeyError: while iterating, a name in ``columns`` that the batch has no column of.
        prefetch.CollateError: while iterating, a column of arrays of different shapes or of
            timestamps (naming the column).
    """

    def __new__(cls, dataset, *args, resumable=False, **kwargs):
        # Only a resumable one has state_dict()/load_state_dict() (a loader checks for them).
        if cls is RaySource and resumable:
            cls = _ResumableRaySource
        return super().__new__(cls)

    def __init__(self, dataset: typing.Any, batch_size: int = 256, *, drop_last: bool = False,
                 columns: typing.Optional[typing.Sequence[str]] = None, resumable: bool = False,
                 **iter_kwargs: typing.Any) -> None:
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
            yield _numpy_batch(batch)

    def __repr__(self):
        return "RaySource(%s, batch_size=%s)" % (type(self.dataset).__name__, self.batch_size)


class _ResumableRaySource(RaySource):
    """A :class:`RaySource` made with ``resumable=True``: its state is how many batches of the
    current epoch it has yielded and whether that epoch ended (a StatefulDataLoader's semantics:
    a state taken after the last batch but before the end resumes into the epoch's empty rest;
    the Prefetcher saves the one after the end at an epoch's end)."""

    def __init__(self, dataset, *args, **kwargs):
        super().__init__(dataset, *args, **kwargs)
        context = getattr(dataset, "context", None)
        if context is None:
            raise ValueError(
                "prefetch: RaySource(resumable=True) needs a Ray Dataset, got a %s: a "
                "DataIterator (streaming_split) yields what the scheduling gives it, which a "
                "resume cannot replay" % type(dataset).__name__)
        if not context.execution_options.preserve_order:
            raise ValueError(
                "prefetch: RaySource(resumable=True) needs the dataset to keep its order: set "
                "ray.data.DataContext.get_current().execution_options.preserve_order = True "
                "before making the dataset (its context has preserve_order=False: blocks arrive "
                "in the order they finish, and a resume would skip other rows than it read)")
        if (self.iter_kwargs.get("local_shuffle_buffer_size")
                and self.iter_kwargs.get("local_shuffle_seed") is None):
            raise ValueError("prefetch: RaySource(resumable=True) with local_shuffle_buffer_size "
                             "needs local_shuffle_seed, or each read shuffles differently")
        self._yielded, self._finished, self._start = 0, False, None

    def __iter__(self):
        loaded, self._start = self._start, None
        skip = 0 if loaded is None or loaded["finished"] else loaded["yielded"]
        self._yielded, self._finished = skip, False
        read = 0
        for batch in super().__iter__():
            read += 1
            if read <= skip:
                continue  # read again and dropped: Ray Data cannot seek
            self._yielded += 1
            yield batch
        if read < skip:
            raise RuntimeError("prefetch: the Ray dataset yielded %d batches where the loaded "
                               "state had consumed %d: it does not give the same batches every "
                               "read" % (read, skip))
        self._finished = True

    def state_dict(self):
        """``{"yielded": batches of the epoch yielded, "finished": whether the epoch ended}``."""
        return {"yielded": self._yielded, "finished": self._finished}

    def load_state_dict(self, state):
        """The next ``iter()`` continues from ``state`` (:meth:`state_dict`'s)."""
        missing = {"yielded", "finished"} - set(state)
        if missing:
            raise KeyError("prefetch: the RaySource state lacks %s" % sorted(missing))
        self._start = {"yielded": int(state["yielded"]), "finished": bool(state["finished"])}
