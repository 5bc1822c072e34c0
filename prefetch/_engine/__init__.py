"""The engine's private Python half: what every loader runs on, none of it public API.

- :mod:`.extension` loads the compiled ``prefetch._C`` (or says how to build it);
- :mod:`.tree` flattens a batch into the engine's leaves and rebuilds it (``PreparedBatch``, the
  form a source may hand the engine directly, is re-exported by :mod:`prefetch.sources`);
- :mod:`.pipeline` is the one engine interface every loader runs on (docs/engine.md);
- :mod:`.resume` keeps a loader's position for ``state_dict()``;
- :mod:`.sharding` splits an epoch's samples across DDP ranks;
- :mod:`.checks` holds the argument checks and small pure helpers the others share;
- :mod:`.forked_children` keeps a forked child of a CUDA process from freeing inherited CUDA
  tensors (registered here, on import).
"""
from . import forked_children

forked_children.register()
