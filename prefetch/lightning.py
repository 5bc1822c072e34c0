"""Lightning integration: a DataModule wrapper that feeds the Trainer through Prefetchers on the
LightningModule's device (optional extra: ``pip install lightning``).

    dm = prefetch.lightning.PrefetchDataModule(MyDataModule(), train_transform=FusedAugment(...))
    trainer.fit(model, datamodule=dm)

Why a DataModule and not a Callback: the DataModule is where Lightning users already say where
batches come from, and it is the one place where the Trainer hands over its device
(``trainer.strategy.root_device``, each DDP rank's own) *before* iterating. A Callback sees
batches only after Lightning fetched them on the host, too late to overlap their copy with the
previous step. The wrapper keeps what Lightning does for DataLoaders: it lets the Trainer inject
its DistributedSampler first (``use_distributed_sampler``), forwards the epoch the Trainer sets
to both that sampler and the transform's draws, and Lightning's own transfer to the device then
finds every tensor already there (a no-op).
"""
from __future__ import annotations

try:
    import lightning.pytorch as pl
    from lightning.pytorch.trainer.states import RunningStage
    from lightning.pytorch.utilities.model_helpers import is_overridden
except ImportError:  # the standalone package
    try:
        import pytorch_lightning as pl
        from pytorch_lightning.trainer.states import RunningStage
        from pytorch_lightning.utilities.model_helpers import is_overridden
    except ImportError as exc:
        raise ImportError(
            "prefetch.lightning needs Lightning: pip install lightning (the 'lightning' extra)"
        ) from exc

import collections.abc
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch.utils.data import DataLoader

from ._core.checks import is_stateful, whole
from .array_loader import ArrayLoader
from .prefetcher import Prefetcher

__all__ = ["PrefetchDataModule"]

# The Trainer's stages: the hook that returns their loaders, Lightning's stage, and whether the
# Trainer's DistributedSampler shuffles.
_STAGES = {
    "train": ("train_dataloader", RunningStage.TRAINING, True),
    "val": ("val_dataloader", RunningStage.VALIDATING, False),
    "test": ("test_dataloader", RunningStage.TESTING, False),
    "predict": ("predict_dataloader", RunningStage.PREDICTING, False),
}


class _SameAs:
    """The default of ``test_transform`` / ``predict_transform``: another stage's transform."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "<same as %s>" % self.name


_SAME_AS_VAL, _SAME_AS_TEST = _SameAs("val_transform"), _SameAs("test_transform")


def _is_loader(obj):
    """An iterable of batches rather than a batch: what a ``*_dataloader`` hook's list or dict
    of several loaders holds (a list of tensors or tuples is one loader's batches)."""
    if isinstance(obj, (DataLoader, ArrayLoader, Prefetcher)):
        return True
    return (isinstance(obj, collections.abc.Iterable)
            and not isinstance(obj, (torch.Tensor, np.ndarray, str, bytes, tuple, list,
                                     collections.abc.Mapping)))


class _LazyEpoch:
    """An epoch that starts at its first ``next()``, as a DataLoader's does. Lightning calls
    ``iter()`` once just to check the loader, and for the first epoch before it sets the epoch;
    an eager start would fetch with the wrong epoch (and prefetch a whole epoch for nothing)."""

    def __init__(self, adapter):
        self._adapter, self._it = adapter, None

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._adapter)

    def __next__(self):
        if self._it is None:
            self._it = self._adapter.start()
        return next(self._it)


class _TrainerLoader:
    """A Prefetcher or an ArrayLoader as the Trainer sees it, through their public interface:

    - ``sampler.set_epoch(e)`` (Lightning calls it on anything with a sampler) reaches the
      source's samplers (a DistributedSampler reshuffles) and the loader's epoch (the
      transform's draws), set again at the start; ``iter()`` calls are not counted as epochs
      (Lightning makes more than one per epoch);
    - epochs start lazily (``_LazyEpoch``);
    - ``state_dict()``/``load_state_dict()`` for Lightning's checkpoints: a loader without a
      resumable position (a Prefetcher over a non-stateful source) saves ``{}`` instead of
      failing the checkpoint.
    """

    # Lightning reads both attributes of anything that has a sampler (shuffle checks, epochs).
    batch_sampler = None

    def __init__(self, loader):
        self.loader, self._epoch = loader, 0

    @property
    def sampler(self):
        return self

    def set_epoch(self, epoch):
        self._epoch = whole(epoch, "epoch")
        self.loader.set_epoch(self._epoch)  # (so a checkpoint taken before the start says it)
        source = getattr(self.loader, "source", None)  # a Prefetcher's DataLoader
        samplers = {}  # by id: the sampler and the batch sampler's may be the same object
        for owner in (source, getattr(source, "batch_sampler", None)):
            sampler = getattr(owner, "sampler", None) if owner is not None else None
            if sampler is not None:
                samplers[id(sampler)] = sampler
        for sampler in samplers.values():
            if callable(getattr(sampler, "set_epoch", None)):
                sampler.set_epoch(epoch)

    @property
    def dataset(self):
        return self.loader.dataset

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        return _LazyEpoch(self)

    def start(self):
        self.loader.set_epoch(self._epoch)  # the saved epoch keeps its resume position
        return iter(self.loader)

    def state_dict(self):
        if isinstance(self.loader, Prefetcher) and not is_stateful(self.loader.source):
            return {}
        return self.loader.state_dict()

    def load_state_dict(self, state):
        if state:
            self.loader.load_state_dict(state)

    def stats(self):
        return self.loader.stats()

    def close(self):
        self.loader.close()

    @property
    def closed(self):
        return self.loader.closed


class PrefetchDataModule(pl.LightningDataModule):
    """Wraps a LightningDataModule (or plain loaders) so the Trainer's batches come through
    Prefetchers on the LightningModule's device, transformed there on the copy stream.

    Args:
        datamodule (LightningDataModule, optional): the DataModule whose ``*_dataloader()`` to
            wrap (its ``prepare_data``, ``setup``, ``teardown`` and state are delegated to it);
            or None with ``train`` / ``val`` / ``test`` / ``predict``.
        train, val, test, predict (iterable or callable, optional): loaders (any iterable of
            batches) or zero-argument callables returning one, used when there is no
            datamodule.
        train_transform, val_transform (callable, optional): e.g.
            :class:`prefetch.FusedAugment`; applied on the device. The training draws follow
            the Trainer's epoch.
        test_transform (callable, optional): for ``trainer.test``; by default the
            ``val_transform`` (evaluation sees what validation sees). Pass None for none.
        predict_transform (callable, optional): for ``trainer.predict``; by default the
            ``test_transform`` (so, if that is not given either, the ``val_transform``). Pass
            None for none.
        **prefetcher_kwargs: passed to every :class:`prefetch.Prefetcher` (depth, num_threads,
            timeout, max_batch_bytes, device_transform).

    A stage's loader is offered to the Trainer only when there is one (the datamodule defines
    its ``*_dataloader``, or the argument is given): a DataModule without validation data gets
    no validation loop, and ``trainer.test`` without test data fails with Lightning's own
    message. A hook that returns a list or dict of loaders (Lightning's several dataloaders)
    gets one Prefetcher per loader. Every Prefetcher a stage opened is closed when the stage
    ends (``teardown``), fails (``on_exception``), or when the Trainer replaces its loaders
    (``reload_dataloaders_every_n_epochs``).

    A loader that is already an :class:`prefetch.ArrayLoader` is only adapted to the Trainer
    (its epoch, a lazy start, checkpoints): build it in your DataModule with
    ``device=self.trainer.strategy.root_device``; it shards itself under DDP.

    Raises:
        ValueError: neither a datamodule nor a loader.
        TypeError: ``device=`` among the Prefetcher's arguments (the Trainer gives the device).
    """

    def __init__(self, datamodule: Optional[pl.LightningDataModule] = None, *,
                 train: Any = None, val: Any = None, test: Any = None, predict: Any = None,
                 train_transform: Optional[Callable] = None,
                 val_transform: Optional[Callable] = None,
                 test_transform: Optional[Callable] = _SAME_AS_VAL,
                 predict_transform: Optional[Callable] = _SAME_AS_TEST,
                 **prefetcher_kwargs: Any) -> None:
        super().__init__()
        explicit = {"train": train, "val": val, "test": test, "predict": predict}
        if datamodule is None and all(v is None for v in explicit.values()):
            raise ValueError("prefetch: PrefetchDataModule needs a datamodule or "
                             "train=/val=/test=/predict= loaders")
        if "device" in prefetcher_kwargs:
            raise TypeError("prefetch: PrefetchDataModule takes the device from the Trainer; "
                            "do not pass device=")
        self.datamodule, self._explicit = datamodule, explicit
        if test_transform is _SAME_AS_VAL:
            test_transform = val_transform
        if predict_transform is _SAME_AS_TEST:
            predict_transform = test_transform
        self.train_transform, self.val_transform = train_transform, val_transform
        self.test_transform, self.predict_transform = test_transform, predict_transform
        self._kwargs = prefetcher_kwargs
        self._open = []  # every Prefetcher (or adapted ArrayLoader) not yet closed
        self._by_stage = {}  # stage -> those its last *_dataloader call opened
        # Lightning runs a stage's loop when its *_dataloader is overridden: offer each only when
        # there is data for it, so a DataModule without validation data gets no validation loop
        # (and no warning), and one without test data gets Lightning's own "no test_dataloader".
        # is_overridden also finds loaders set on the instance (LightningDataModule.from_datasets).
        for stage, (hook, _, _) in _STAGES.items():
            if explicit[stage] is not None or (
                    datamodule is not None
                    and is_overridden(hook, datamodule, parent=pl.LightningDataModule)):
                setattr(self, hook, getattr(self, "_%s_loader" % stage))

    # -- delegated to the wrapped DataModule -----------------------------------------------------

    def prepare_data(self) -> None:
        """The wrapped DataModule's ``prepare_data`` (nothing without one)."""
        if self.datamodule is not None:
            self.datamodule.prepare_data()

    def setup(self, stage: Optional[str] = None) -> None:
        """The wrapped DataModule's ``setup``, after handing it the Trainer.

        Args:
            stage (str, optional): Lightning's stage (``"fit"``, ``"validate"``, ...).
        """
        if self.datamodule is not None:
            if getattr(self.datamodule, "trainer", None) is None and self.trainer is not None:
                self.datamodule.trainer = self.trainer
            self.datamodule.setup(stage)

    def _close_all(self):
        self._by_stage.clear()
        while self._open:
            self._open.pop().close()

    def teardown(self, stage: Optional[str] = None) -> None:
        """Closes every Prefetcher the stages opened, then the wrapped DataModule's
        ``teardown``.

        Args:
            stage (str, optional): Lightning's stage.
        """
        self._close_all()
        if self.datamodule is not None:
            self.datamodule.teardown(stage)

    def on_exception(self, exception: BaseException) -> None:
        """Closes every Prefetcher (a stage that raised ends without the teardown hook), then
        calls the wrapped DataModule's ``on_exception`` when it has one.

        Args:
            exception (BaseException): what the stage raised.
        """
        self._close_all()
        if self.datamodule is not None and callable(getattr(self.datamodule, "on_exception", None)):
            self.datamodule.on_exception(exception)

    def state_dict(self) -> dict:
        """The wrapped DataModule's state (the loaders' positions are the Trainer's to save).

        Returns:
            dict: the wrapped DataModule's ``state_dict()``; ``{}`` without one.
        """
        return self.datamodule.state_dict() if self.datamodule is not None else {}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores the wrapped DataModule's state.

        Args:
            state_dict (dict): what :meth:`state_dict` returned.
        """
        if self.datamodule is not None:
            self.datamodule.load_state_dict(state_dict)

    # -- the loaders -------------------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        """The LightningModule's device, as the Trainer's strategy placed it (each rank's own).
        Raises RuntimeError before a Trainer has attached this DataModule."""
        if self.trainer is None:
            raise RuntimeError("prefetch: PrefetchDataModule's loaders are built by a Trainer "
                               "(trainer.fit/validate/test/predict(model, datamodule=...))")
        return self.trainer.strategy.root_device

    def _source(self, name, explicit):
        if self.datamodule is not None:
            return getattr(self.datamodule, name)()
        return explicit() if callable(explicit) and not hasattr(explicit, "__iter__") else explicit

    def _wrap(self, loader, transform, stage, shuffle):
        # Several loaders (a list or dict of them, as Lightning takes): one Prefetcher each.
        if isinstance(loader, collections.abc.Mapping) and loader and all(
                _is_loader(v) for v in loader.values()):
            return (type(loader) if isinstance(loader, dict) else dict)(
                (k, self._wrap(v, transform, stage, shuffle)) for k, v in loader.items())
        if isinstance(loader, (list, tuple)) and loader and all(_is_loader(v) for v in loader):
            return (list if isinstance(loader, list) else tuple)(
                self._wrap(v, transform, stage, shuffle) for v in loader)
        if loader is None or isinstance(loader, Prefetcher):
            return loader
        if isinstance(loader, ArrayLoader):
            adapted = _TrainerLoader(loader)
            self._open.append(adapted)
            return adapted
        if isinstance(loader, DataLoader):
            # What the Trainer would have done to this DataLoader: inject its DistributedSampler.
            connector = getattr(self.trainer, "_data_connector", None)
            prepare = getattr(connector, "_prepare_dataloader", None)
            if prepare is not None:
                loader = prepare(loader, shuffle=shuffle, mode=stage)
            elif self.trainer.world_size > 1:
                raise RuntimeError(
                    "prefetch: cannot let this Lightning version inject its DistributedSampler; "
                    "give the DataLoader a DistributedSampler yourself, or use "
                    "prefetch.ArrayLoader")
        adapted = _TrainerLoader(Prefetcher(loader, device=self.device, transform=transform,
                                            **self._kwargs))
        self._open.append(adapted)
        return adapted

    def _loader(self, stage):
        # The Trainer asks again for a stage's loaders only to replace them
        # (reload_dataloaders_every_n_epochs): close the ones it drops, or their threads pile up.
        for old in self._by_stage.pop(stage, []):
            old.close()
            self._open.remove(old)
        hook, running_stage, shuffle = _STAGES[stage]
        opened = len(self._open)
        loader = self._wrap(self._source(hook, self._explicit[stage]),
                            getattr(self, stage + "_transform"), running_stage, shuffle=shuffle)
        self._by_stage[stage] = self._open[opened:]
        return loader

    # Bound as train_dataloader, val_dataloader, ... when the stage has data (see __init__).
    def _train_loader(self):
        return self._loader("train")

    def _val_loader(self):
        return self._loader("val")

    def _test_loader(self):
        return self._loader("test")

    def _predict_loader(self):
        return self._loader("predict")
