"""Empty, kept only while docs/custom_ops.md ("Adding an op to prefetch itself") names it and
``tests/test_layout.py`` checks that the files it names exist: each op's fake kernel is registered
beside its wrapper, in its family's module (:mod:`prefetch.ops.normalize`,
:mod:`prefetch.ops.geometry`, :mod:`prefetch.ops.color`, :mod:`prefetch.ops.decode`), when
:mod:`prefetch.ops` imports it. Delete this file when that doc names the family modules."""
