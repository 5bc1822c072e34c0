"""The public API documents itself: every exported function and class (the ``__all__`` of
``prefetch``, ``prefetch.transforms``, ``prefetch.transforms.v2``, ``prefetch.ops``,
``prefetch.sources`` and ``prefetch.store``, and the documented names of a few public modules)
has type hints and a docstring with ``Args:`` when it takes arguments and ``Returns:`` when it
returns a value, and no docstring names a module that no longer exists.

The walk reads the real objects (``inspect``), so a new export without hints or sections fails
here; the count check below makes sure the walk itself found the API.
"""
import enum
import importlib
import inspect
import re

import pytest

import prefetch
import prefetch.transforms
import prefetch.transforms.v2

# Documented functions and classes of public modules that are not in an ``__all__`` above
# (README.md and docs/ name them by their module path).
MODULE_NAMES = [
    ("prefetch.collate", "samples"),
    ("prefetch.info", "report"),
    ("prefetch.info", "collect"),
    ("prefetch.crop_boxes", "random_resized_boxes"),
    ("prefetch.crop_boxes", "center_boxes"),
    ("prefetch.crop_boxes", "center_anchor"),
    ("prefetch.crop_boxes", "resized_output_size"),
    ("prefetch.transforms.multi_view", "view_seeds"),
    ("prefetch.transforms.ssl", "simclr_views"),
    ("prefetch.transforms.ssl", "byol_views"),
    ("prefetch.transforms.ssl", "dino_views"),
    ("prefetch.transforms.ssl", "swav_views"),
    ("prefetch.transforms.policies", "trivial_augment_wide"),
    ("prefetch.transforms.policies", "rand_augment"),
    ("prefetch.transforms.policies", "auto_augment"),
    ("prefetch.transforms.policies", "color_jitter"),
    ("prefetch.transforms.policies", "op_parameters"),
    ("prefetch.transforms.policies", "OpTable"),
    ("prefetch.transforms.policy_ops", "apply_table"),
    ("prefetch.transforms.policy_ops", "affine"),
    ("prefetch.transforms.policy_ops", "pixel_maps"),
    ("prefetch.transforms.mixup", "mixup_target"),
    ("prefetch.lightning", "PrefetchDataModule"),  # when Lightning is installed
]

STALE_MODULES = ("prefetch._pipeline", "prefetch._resume", "prefetch._tree")


# Every public package's exports: the top, the transforms and their torchvision-named recipe, the
# ops, the sources and the store.
PUBLIC_MODULES = (prefetch, prefetch.transforms, prefetch.transforms.v2, prefetch.ops,
                  prefetch.sources, prefetch.store)


def _exported():
    """``(qualified name, object)`` for every function and class the API exports."""
    out = []
    for module in PUBLIC_MODULES:
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                out.append(("%s.%s" % (module.__name__, name), obj))
    for module_name, name in MODULE_NAMES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # an optional extra (Lightning) that is not installed
            continue
        obj = getattr(module, name)
        out.append(("%s.%s" % (module_name, name), obj))
    return out


def _ours(obj):
    return (getattr(obj, "__module__", None) or "").startswith("prefetch")


def _methods(cls):
    """The public methods of ``cls`` defined in prefetch (its own and inherited), with the
    ``__call__`` a Transform is used by."""
    seen = {}
    for klass in reversed(cls.__mro__):
        if not _ours(klass):
            continue
        for name, attr in vars(klass).items():
            if name.startswith("_") and name != "__call__":
                continue
            fn = attr.__func__ if isinstance(attr, (staticmethod, classmethod)) else attr
            if inspect.isfunction(fn) and _ours(fn):
                seen[name] = fn
    return sorted(seen.items())


def _entries():
    entries, done = [], set()
    for qualname, obj in _exported():
        if id(obj) in done:
            continue
        done.add(id(obj))
        entries.append((qualname, obj))
        if inspect.isclass(obj) and _ours(obj):
            for name, fn in _methods(obj):
                entries.append(("%s.%s" % (qualname, name), fn))
    return entries


ENTRIES = _entries()


def _parameters(fn):
    """The parameters a caller passes (not ``self``, ``cls`` or a NamedTuple's ``_cls``)."""
    params = list(inspect.signature(fn).parameters.values())
    if params and params[0].name in ("self", "cls", "_cls"):
        params = params[1:]
    return params


def _constructor(cls):
    """The function whose parameters build ``cls`` (its ``__init__``, or a NamedTuple's /
    dataclass's generated ``__new__``/``__init__``), or None when it takes list's or object's."""
    if issubclass(cls, enum.Enum):
        # An Enum is not built by its user: ``Mode(value)`` looks up an existing member, and the
        # ``value`` parameter belongs to enum's ``__new__``, not to anything prefetch documents.
        return None
    for name in ("__init__", "__new__"):
        for klass in cls.__mro__:
            fn = vars(klass).get(name)
            if fn is not None:
                fn = fn.__func__ if isinstance(fn, (staticmethod, classmethod)) else fn
                if inspect.isfunction(fn) and (_ours(klass) or fn.__qualname__.startswith(
                        cls.__qualname__)):
                    return fn
                break
    return None


def _is_namedtuple(cls):
    return inspect.isclass(cls) and issubclass(cls, tuple) and hasattr(cls, "_fields")


def _section_entries(doc, section):
    """The names an ``Args:``-style section of ``doc`` documents: its entries' ``name (type):``
    or ``name:`` lines, one indent below the section's header."""
    lines = doc.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == section)
    except StopIteration:
        return set()
    header_indent = len(lines[start]) - len(lines[start].lstrip())
    names, entry_indent = set(), None
    for line in lines[start + 1:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent <= header_indent:
            break
        entry_indent = indent if entry_indent is None else entry_indent
        match = re.match(r"(\w+)( \(.*\))?:", line.strip())
        if indent == entry_indent and match:
            names.add(match.group(1))
    return names


def test_the_walk_finds_the_api():
    names = {q for q, _ in ENTRIES}
    assert len(ENTRIES) > 60, len(ENTRIES)
    for expected in ("prefetch.FusedAugment", "prefetch.FusedAugment.draws",
                     "prefetch.transforms.Transform.apply", "prefetch.transforms.get_leaf",
                     "prefetch.built_with_cuda", "prefetch.collate.samples"):
        assert expected in names


@pytest.mark.parametrize("qualname,obj", ENTRIES, ids=[q for q, _ in ENTRIES])
def test_signature_has_type_hints(qualname, obj):
    fn = _constructor(obj) if inspect.isclass(obj) else obj
    if fn is None:
        return  # built as its base builds it (Samples is a list)
    missing = [p.name for p in _parameters(fn) if p.annotation is inspect.Parameter.empty]
    assert not missing, "%s: parameters without a type hint: %s" % (qualname, missing)
    if not inspect.isclass(obj):
        assert inspect.signature(fn).return_annotation is not inspect.Signature.empty, \
            "%s: no return type hint" % qualname


@pytest.mark.parametrize("qualname,obj", ENTRIES, ids=[q for q, _ in ENTRIES])
def test_docstring_has_sections(qualname, obj):
    doc = inspect.getdoc(obj) or ""
    assert doc, "%s has no docstring" % qualname
    fn = _constructor(obj) if inspect.isclass(obj) else obj
    if _is_namedtuple(obj):
        # A NamedTuple's constructor arguments are its fields, which stay on it as attributes:
        # the API documents them either as the arguments a caller builds it with (``Args:``:
        # BatchPosition, Draws) or as the attributes a reader reads (``Attributes:``: Reader,
        # Leaf), and either way every field is an entry of that one section.
        entries = [_section_entries(doc, section) for section in ("Args:", "Attributes:")]
        assert any(set(obj._fields) <= names for names in entries), \
            "%s: its fields %s are not all entries of one Args: or Attributes: section" % (
                qualname, list(obj._fields))
    elif fn is not None and _parameters(fn):
        assert "Args:" in doc, "%s takes arguments but its docstring has no Args:" % qualname
    if not inspect.isclass(obj):
        returns = inspect.signature(obj).return_annotation
        if returns not in (None, "None", inspect.Signature.empty):
            assert "Returns:" in doc or "Yields:" in doc, \
                "%s returns %s but its docstring has no Returns:" % (qualname, returns)


@pytest.mark.parametrize("qualname,obj", ENTRIES, ids=[q for q, _ in ENTRIES])
def test_docstring_names_no_stale_module(qualname, obj):
    texts = [inspect.getdoc(obj) or ""]
    module = inspect.getmodule(obj)
    if module is not None:
        texts.append(module.__doc__ or "")
    for text in texts:
        for stale in STALE_MODULES:
            assert not re.search(re.escape(stale) + r"\b", text), \
                "%s's documentation names %s, which no longer exists" % (qualname, stale)
