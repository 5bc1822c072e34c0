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
try:
    import lightning.pytorch as pl
    from lightning.pytorch.trainer.states import RunningStage
except ImportError:  # the standalone package
    try:
        import pytorch_lightning as pl
        from pytorch_lightning.trainer.states import RunningStage
    except ImportError as exc:
        raise ImportError(
            "prefetch.lightning needs Lightning: pip install lightning (the 'lightning' extra)"
        ) from exc

from torch.utils.data import DataLoader

from .array_loader import ArrayLoader
from .prefetcher import Prefetcher

__all__ = ["PrefetchDataModule"]


class _EpochSetter:
    """What Lightning finds as the loader's ``sampler``: its ``set_epoch(e)`` reaches the source's
    samplers (a DistributedSampler reshuffles) and the Prefetcher's epoch (the transform's draws)."""

    def __init__(self, prefetcher, source):
        self._prefetcher, self._source = prefetcher, source

    def set_epoch(self, epoch):
        samplers = {}  # by id: the sampler and the batch sampler's may be the same object
        for owner, name in ((self._source, "sampler"),
                            (getattr(self._source, "batch_sampler", None), "sampler")):
            sampler = getattr(owner, name, None) if owner is not None else None
            if sampler is not None:
                samplers[id(sampler)] = sampler
        for sampler in samplers.values():
            if callable(getattr(sampler, "set_epoch", None)):
                sampler.set_epoch(epoch)
        self._prefetcher.set_epoch(epoch)


class _LazyEpoch:
    """An epoch that starts at its first ``next()``, as a DataLoader's does. Lightning calls
    ``iter()`` once just to check the loader, and for the first epoch before it sets the epoch;
    an eager start would fetch with the wrong epoch (and prefetch a whole epoch for nothing)."""

    def __init__(self, loader):
        self._loader, self._it = loader, None

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._loader)

    def __next__(self):
        if self._it is None:
            self._it = self._loader._start_now()
        return next(self._it)


class _TrainerPrefetcher(Prefetcher):
    """A Prefetcher whose epoch is the one the Trainer last set (``iter()`` calls are not
    counted: Lightning makes more than one per epoch), started lazily."""

    _trainer_epoch = 0

    @property
    def sampler(self):
        return _EpochSetter(self, self.source)

    # Lightning reads both attributes of anything that has a sampler (shuffle checks, epochs).
    batch_sampler = None

    def set_epoch(self, epoch):
        self._trainer_epoch = int(epoch)
        super().set_epoch(epoch)

    def __iter__(self):
        return _LazyEpoch(self)

    # Lightning saves the state of every loader that has these two methods in its checkpoints.
    # A stateful source (StatefulDataLoader) resumes mid-epoch exactly; any other source has no
    # position to save, and a checkpoint must not fail because of that.
    def state_dict(self):
        if callable(getattr(self.source, "state_dict", None)):
            return super().state_dict()
        return {}

    def load_state_dict(self, state):
        if state:
            super().load_state_dict(state)

    def _start_now(self):
        super().set_epoch(self._trainer_epoch)
        return super().__iter__()


class _TrainerArrays:
    """An ArrayLoader as the Trainer sees it: the Trainer's epoch (through ``sampler``), a lazy
    start, and the loader's state in checkpoints."""

    def __init__(self, loader):
        self.loader, self._epoch = loader, 0

    @property
    def sampler(self):
        return self

    batch_sampler = None

    def set_epoch(self, epoch):
        self._epoch = int(epoch)

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        return _LazyEpoch(self)

    def _start_now(self):
        self.loader.set_epoch(self._epoch)  # the saved epoch keeps its resume position
        return iter(self.loader)

    def state_dict(self):
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self.loader.load_state_dict(state)

    def close(self):
        self.loader.close()


class PrefetchDataModule(pl.LightningDataModule):
    """Wraps a LightningDataModule (or plain loaders) so the Trainer's batches come through
    Prefetchers on the LightningModule's device, transformed there on the copy stream.

    Args:
        datamodule: the DataModule whose ``*_dataloader()`` to wrap (its ``prepare_data``,
            ``setup``, ``teardown`` and state are delegated to it); or None with ``train`` /
            ``val``.
        train, val: loaders (any iterable of batches) or zero-argument callables returning one,
            used when there is no datamodule.
        train_transform, val_transform: e.g. :class:`prefetch.FusedAugment`; applied on the
            device. The training draws follow the Trainer's epoch.
        **prefetcher_kwargs: passed to every :class:`prefetch.Prefetcher` (depth, num_threads,
            timeout, max_batch_bytes, device_transform).

    A loader that is already an :class:`prefetch.ArrayLoader` is only adapted to the Trainer
    (its epoch, a lazy start, checkpoints): build it in your DataModule with
    ``device=self.trainer.strategy.root_device``; it shards itself under DDP.
    """

    def __init__(self, datamodule=None, *, train=None, val=None, train_transform=None,
                 val_transform=None, **prefetcher_kwargs):
        super().__init__()
        if datamodule is None and train is None and val is None:
            raise ValueError("prefetch: PrefetchDataModule needs a datamodule or train=/val= loaders")
        if "device" in prefetcher_kwargs:
            raise TypeError("prefetch: PrefetchDataModule takes the device from the Trainer; "
                            "do not pass device=")
        self.datamodule, self._train, self._val = datamodule, train, val
        self.train_transform, self.val_transform = train_transform, val_transform
        self._kwargs = prefetcher_kwargs
        self._open = []
        # Lightning runs validation when val_dataloader is overridden: offer it only when there
        # is validation data, so a DataModule without it gets no validation loop (and no warning).
        has_val = val is not None or (
            datamodule is not None
            and type(datamodule).val_dataloader is not pl.LightningDataModule.val_dataloader)
        if has_val:
            self.val_dataloader = self._val_dataloader

    # -- delegated to the wrapped DataModule -----------------------------------------------------

    def prepare_data(self):
        if self.datamodule is not None:
            self.datamodule.prepare_data()

    def setup(self, stage=None):
        if self.datamodule is not None:
            if getattr(self.datamodule, "trainer", None) is None and self.trainer is not None:
                self.datamodule.trainer = self.trainer
            self.datamodule.setup(stage)

    def teardown(self, stage=None):
        for p in self._open:
            p.close()
        self._open.clear()
        if self.datamodule is not None:
            self.datamodule.teardown(stage)

    def state_dict(self):
        return self.datamodule.state_dict() if self.datamodule is not None else {}

    def load_state_dict(self, state_dict):
        if self.datamodule is not None:
            self.datamodule.load_state_dict(state_dict)

    # -- the loaders -------------------------------------------------------------------------------

    @property
    def device(self):
        """The LightningModule's device, as the Trainer's strategy placed it (each rank's own)."""
        if self.trainer is None:
            raise RuntimeError("prefetch: PrefetchDataModule's loaders are built by a Trainer "
                               "(trainer.fit(model, datamodule=...))")
        return self.trainer.strategy.root_device

    def _source(self, name, explicit):
        if self.datamodule is not None:
            return getattr(self.datamodule, name)()
        return explicit() if callable(explicit) and not hasattr(explicit, "__iter__") else explicit

    def _wrap(self, loader, transform, stage, shuffle):
        if loader is None or isinstance(loader, Prefetcher):
            return loader
        if isinstance(loader, ArrayLoader):
            adapted = _TrainerArrays(loader)
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
                    "give the DataLoader a DistributedSampler yourself, or use prefetch.ArrayLoader")
        prefetcher = _TrainerPrefetcher(loader, device=self.device, transform=transform,
                                        **self._kwargs)
        self._open.append(prefetcher)
        return prefetcher

    def train_dataloader(self):
        return self._wrap(self._source("train_dataloader", self._train), self.train_transform,
                          RunningStage.TRAINING, shuffle=True)

    def _val_dataloader(self):
        return self._wrap(self._source("val_dataloader", self._val), self.val_transform,
                          RunningStage.VALIDATING, shuffle=False)
