"""The bottom layer: what every other part of prefetch stands on, importing nothing above it.

Named ``_core`` because it is the core the other layers are built on (``_engine`` above it, the
ops, sources and transforms above that, the public modules on top; ``tests/test_layout.py``
checks the order), and private because users reach these names through the public modules
(``prefetch.Ragged``, ``prefetch.errors``, ``prefetch.sources``), never here.

- :mod:`.extension` loads the compiled ``prefetch._C`` (or says how to build it);
- :mod:`.checks` holds the argument checks and small pure helpers every layer shares;
- :mod:`.versions` reads installed package versions (standard library only);
- :mod:`.errors` the exceptions prefetch raises to users (re-exported by :mod:`prefetch.errors`);
- :mod:`.samples` and :mod:`.ragged` the batch leaves ``Samples`` and ``Ragged``
  (re-exported by :mod:`prefetch.samples`, :mod:`prefetch.ragged`), :mod:`.spans` the gather of
  element ranges both Ragged and the tree use;
- :mod:`.samples_to_tensors` turns per-sample ndarrays and numbers into tensors;
- :mod:`.tree` flattens a batch into the engine's leaves and rebuilds it (``PreparedBatch``, the
  form a source may hand the engine directly, is re-exported by :mod:`prefetch.sources`).
"""
