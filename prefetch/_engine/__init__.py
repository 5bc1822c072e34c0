"""The engine's private Python half: what every loader runs on, none of it public API. It stands
on :mod:`prefetch._core` and imports no source, transform or op (tests/test_layout.py): what it
needs of them, a loader passes in (a source's clean-up) or lives here (the transform contract it
runs by).

- :mod:`.pipeline` is the one engine interface every loader runs on (docs/engine.md), built of
  :mod:`.lifecycle` (joining, stopping and shutting down; interpreter exit), :mod:`.counters`
  (the stats and their derived fractions), :mod:`.producer` (the producer thread's loop and
  the state it shares with the consumer), :mod:`.device_stage` (the batch on the device: its
  moves ordered, the transforms run on the copy stream) and :mod:`.epoch_run` (the consumer's
  iterator);
- :mod:`.transform_contract` is the part of the transform contract the engine runs by
  (``BatchPosition``, the ``Transform`` base class; re-exported by :mod:`prefetch.transforms`);
- :mod:`.resume` keeps a loader's position for ``state_dict()``, :mod:`.lazy_epoch` starts an
  epoch at its first ``next()``;
- :mod:`.sharding` splits an epoch's samples across DDP ranks;
- :mod:`.forked_children` keeps a forked child of a CUDA process from freeing inherited CUDA
  tensors (registered here, on import).
"""
from . import forked_children

forked_children.register()
