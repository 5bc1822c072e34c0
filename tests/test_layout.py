"""The package's layout holds: the layers of docs/engine.md in one direction (every import, inside
functions and TYPE_CHECKING blocks too, reaches the importer's layer or a lower one), no private
name crossing a package boundary, no import cycle (read statically with every import, and every
module imported in a fresh interpreter in sorted and in reverse order, so no cycle hides behind
the order prefetch/__init__ happens to import in); the documented module paths keep working;
importing prefetch imports none of its optional integrations (docs/custom_ops.md's list of an
op's files: tests/test_op_files.py).

``PREFETCH_LAYOUT_ROOT=<a checkout>`` points the static checks at another tree (the layer and
private-name tests fail on a tree whose layers run both ways)."""
import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "prefetch"
CHECKED_ROOT = pathlib.Path(os.environ.get("PREFETCH_LAYOUT_ROOT", ROOT)).resolve()

#: The layers, bottom first: a module may import its own layer and the ones below it. A name is
#: a module or a package (all its submodules); every module of prefetch must be in one.
LAYERS = [
    # utilities: the extension loader, checks, errors, Samples/Ragged and the batch tree
    {"prefetch._core", "prefetch._C"},
    # the engine: Pipeline, resume, sharding, the transform contract the engine runs by
    {"prefetch._engine"},
    # the ops (wrappers of the compiled kernels, their fakes)
    {"prefetch.ops"},
    # what a loader runs: sources, transforms, and the collate_fn the worker ring's workers run
    {"prefetch.sources", "prefetch.transforms", "prefetch.collate"},
    # the public modules
    {"prefetch", "prefetch.prefetcher", "prefetch.array_loader", "prefetch.lightning",
     "prefetch.store", "prefetch.pack", "prefetch.bench", "prefetch.info", "prefetch.ray",
     "prefetch.crop_boxes", "prefetch.errors", "prefetch.ragged", "prefetch.samples",
     "prefetch.timm"},
]

#: (importer, imported) pairs allowed to cross a package boundary with a private name: the
#: compiled extension, loaded in exactly one place.
PRIVATE_ALLOWED = {("prefetch._core.extension", "prefetch._C")}


def _modules(root=ROOT):
    names = []
    for path in sorted((root / "prefetch").rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[-1] == "__main__":
            continue
        names.append(".".join(parts))
    return names


MODULES = _modules()


@pytest.mark.parametrize("order", ["sorted", "reversed"])
def test_every_module_imports_in_either_order_in_one_interpreter(order):
    names = MODULES if order == "sorted" else MODULES[::-1]
    # A module whose optional dependency (Lightning, Ray) is not installed refuses to import with
    # an ImportError caused by that third-party module's absence: that is its documented
    # behaviour, not a cycle, so it is skipped; any other failure fails the test.
    code = (
        "import importlib, sys\n"
        "def optional_missing(error):\n"
        "    while error is not None:\n"
        "        name = getattr(error, 'name', None) or ''\n"
        "        if isinstance(error, ModuleNotFoundError) and name.split('.')[0] != 'prefetch':\n"
        "            return True\n"
        "        error = error.__cause__ or error.__context__\n"
        "    return False\n"
        "for n in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(n)\n"
        "    except ImportError as error:\n"
        "        if not optional_missing(error):\n"
        "            raise\n"
        "        print('skipped', n, file=sys.stderr)\n"
    )
    child = subprocess.run([sys.executable, "-c", code] + names, capture_output=True, text=True,
                           cwd=ROOT, timeout=120)
    assert child.returncode == 0, child.stderr


def _path_of(name, root):
    path = root / (name.replace(".", "/") + ".py")
    return path if path.exists() else root / name.replace(".", "/") / "__init__.py"


def _type_checking_lines(tree):
    """The line numbers inside ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``) blocks."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = getattr(test, "id", None) or getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for child in node.body:
                    lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _walk(tree):
    """Every node of ``tree`` with whether it lies inside a function (a module-level ``try`` or
    ``if`` runs at import, a function's body later)."""
    stack = [(tree, False)]
    while stack:
        node, in_function = stack.pop()
        yield node, in_function
        inside = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        stack.extend((child, inside) for child in ast.iter_child_nodes(node))


def imports(modules, root):
    """Every import of every module in ``modules`` (dotted names of files under ``root``),
    wherever it is (module level, inside a function or class, in a TYPE_CHECKING block), as
    ``(importer, imported module, imported name or None, line, where)`` with ``where`` one of
    "module", "function" (any nested block) or "type-checking"; relative imports resolved. An
    imported name that is a submodule (``from pkg import sub``) is imported as that module."""
    known = set(modules)
    out = []
    for name in modules:
        path = _path_of(name, root)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text())
        typing_only = _type_checking_lines(tree)
        for node, in_function in _walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            where = ("type-checking" if node.lineno in typing_only
                     else "function" if in_function else "module")
            if isinstance(node, ast.Import):
                out += [(name, a.name, None, node.lineno, where) for a in node.names]
                continue
            target = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                full = target + "." + alias.name
                if full in known or (root / full.replace(".", "/")).with_suffix(".so").exists() \
                        or any((root / full.replace(".", "/")).parent.glob(alias.name + ".*.so")):
                    out.append((name, full, None, node.lineno, where))
                else:
                    out.append((name, target, alias.name, node.lineno, where))
    return out


def layer_of(module):
    """The index in LAYERS of ``module`` (its longest listed prefix; ``prefetch`` itself is only
    the package's ``__init__``), or None."""
    best, index = "", None
    for i, layer in enumerate(LAYERS):
        for entry in layer:
            inside = module.startswith(entry + ".") and entry != "prefetch"
            if (module == entry or inside) and len(entry) > len(best):
                best, index = entry, i
    return index


def layer_violations(root):
    """Imports of a higher layer, as "importer -> imported (line, where)" strings, and the
    modules of prefetch in no layer."""
    modules = _modules(root)
    bad = ["%s is in no layer of LAYERS" % m for m in modules if layer_of(m) is None]
    known = set(modules)
    for importer, imported, _, line, where in imports(modules, root):
        if not imported.startswith("prefetch.") and imported != "prefetch":
            continue
        mine, theirs = layer_of(importer), layer_of(imported)
        if theirs is None and imported not in known:
            continue  # a name of a package that is no module (a compiled extension's attribute)
        if mine is not None and theirs is not None and theirs > mine:
            bad.append("%s -> %s (line %d, %s)" % (importer, imported, line, where))
    return bad


def _package_of(module, root):
    return module if _path_of(module, root).name == "__init__.py" else module.rsplit(".", 1)[0]


def private_crossings(root):
    """``from X import _name`` (or ``import``/``from`` of a module named ``_x``... is allowed:
    private packages are how layers are named) where X is in another package than the
    importer, as "importer: X._name (line)" strings; dunders and PRIVATE_ALLOWED aside."""
    modules = _modules(root)
    bad = []
    for importer, imported, name, line, where in imports(modules, root):
        if not imported.startswith("prefetch"):
            continue
        leaf = name if name is not None else imported.rsplit(".", 1)[-1]
        if not leaf.startswith("_") or leaf.startswith("__"):
            continue
        if name is None and imported in modules:
            continue  # a private module (a layer's package, a module of one) imported whole
        owner = imported if name is not None else imported.rsplit(".", 1)[0]
        owner_package = _package_of(owner, root) if owner in modules else owner
        full = imported + "." + name if name is not None else imported
        if owner_package != _package_of(importer, root) and (importer, full) not in PRIVATE_ALLOWED:
            bad.append("%s: %s (line %d, %s)" % (importer, full, line, where))
    return bad


def import_cycles(modules, root, where=("module", "function", "type-checking")):
    """The cycles of the import graph of ``modules`` (dotted names of files under ``root``),
    counting the imports found in ``where``, each as a list of names that ends where it starts."""
    known = set(modules)
    graph = {name: set() for name in modules}
    for importer, imported, _, _, kind in imports(modules, root):
        if kind in where and imported in known and imported != importer:
            graph[importer].add(imported)
    seen, stack, cycles = set(), [], []

    def visit(node):
        if node in stack:
            cycles.append(stack[stack.index(node):] + [node])
            return
        if node in seen:
            return
        seen.add(node)
        stack.append(node)
        for dep in sorted(graph[node]):
            visit(dep)
        stack.pop()

    for name in modules:
        visit(name)
    # A package's __init__ importing its own submodules is how packages work, not a cycle: Python
    # runs the parent's __init__ before a child, and no child here reads its parent's names.
    return [c for c in cycles if not any(b.startswith(a + ".") for a, b in zip(c, c[1:]))]


def _tree(tmp_path, files):
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_cycle_finder_finds_a_cycle_also_through_a_function(tmp_path):
    _tree(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from .b import x\n",
                     "pkg/b.py": "from . import c\nx = 1\n",
                     "pkg/c.py": "def f():\n    import pkg.a\n"})
    names = ["pkg", "pkg.a", "pkg.b", "pkg.c"]
    assert import_cycles(names, tmp_path) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
    assert import_cycles(names, tmp_path, where=("module",)) == []


def test_the_layer_and_private_name_checks_find_what_they_look_for(tmp_path):
    # A bottom module importing a public one inside a function and under TYPE_CHECKING, a
    # source importing a private name of the engine, a module in no layer.
    _tree(tmp_path, {
        "prefetch/__init__.py": "",
        "prefetch/prefetcher.py": "from ._core.checks import whole\n",
        "prefetch/_core/__init__.py": "",
        "prefetch/_core/checks.py": ("import typing\nif typing.TYPE_CHECKING:\n"
                                     "    from ..sources import x\n"
                                     "def whole():\n    from ..prefetcher import P\n"),
        "prefetch/_engine/__init__.py": "",
        "prefetch/_engine/tree.py": "_LEAF = 0\nfrom .._core.checks import whole as _whole\n",
        "prefetch/sources/__init__.py": "from .._engine.tree import _LEAF\n",
        "prefetch/elsewhere.py": "",
    })
    assert sorted(layer_violations(tmp_path)) == [
        "prefetch._core.checks -> prefetch.prefetcher (line 5, function)",
        "prefetch._core.checks -> prefetch.sources (line 3, type-checking)",
        "prefetch.elsewhere is in no layer of LAYERS"]
    assert private_crossings(tmp_path) == ["prefetch.sources: prefetch._engine.tree._LEAF (line 1, module)"]


def test_no_module_imports_a_higher_layer():
    assert layer_violations(CHECKED_ROOT) == []


def test_no_private_name_crosses_a_package_boundary():
    assert private_crossings(CHECKED_ROOT) == []


def test_no_module_imports_a_module_that_imports_it_back():
    assert import_cycles(_modules(CHECKED_ROOT), CHECKED_ROOT) == []


@pytest.mark.parametrize("path, name", [
    ("prefetch.ops", "normalize_flip"), ("prefetch.ops", "decode_jpeg"), ("prefetch.ops", "output_pool_stats"),
    ("prefetch.transforms", "Transform"), ("prefetch.transforms", "FusedAugment"),
    ("prefetch.transforms", "BatchPosition"), ("prefetch.ray", "RaySource"),
    ("prefetch.crop_boxes", "random_resized_boxes"), ("prefetch.collate", "samples"),
    ("prefetch.sources", "PreparedBatch"), ("prefetch", "FusedAugment")])
def test_documented_paths_still_work(path, name):
    import importlib

    assert hasattr(importlib.import_module(path), name)


def test_import_prefetch_pulls_in_neither_ray_nor_lightning():
    code = ("import sys, prefetch; heavy = [m for m in ('ray', 'lightning', 'pytorch_lightning') "
            "if m in sys.modules]; print(heavy); assert not heavy")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def _standard_headers(text, search, seen):
    """The standard headers `text` includes, directly or through the project's headers."""
    out = set()
    for bracket, name in re.findall(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', text, re.M):
        if bracket == "<":
            out.add(name)
            continue
        header = next((d / name for d in search if (d / name).is_file()), None)
        if header is not None and header not in seen:
            seen.add(header)
            out |= _standard_headers(header.read_text(), search, seen)
    return out


def test_avx2_sources_see_every_standard_header_before_their_target_pragma():
    # GCC 13 refuses to build a standard header first included inside `#pragma GCC target`
    # (its always_inline members become AVX2-only: "inlining failed ... target specific option
    # mismatch" in std::allocator, the first GPU machine's build). CI's GCC 12 accepts it, so
    # the rule is checked on the sources: everything the code after the pragma includes, but
    # the intrinsics headers (made for target pragmas), is already included before it.
    kernels = ROOT / "csrc" / "kernels"
    search = [kernels, ROOT / "csrc" / "core"]
    sources = [p for p in kernels.rglob("*.cpp") if "#pragma GCC target" in p.read_text()]
    assert len(sources) >= 2, "the AVX2 sources moved: update this test"
    for source in sources:
        before, after = source.read_text().split("#pragma GCC push_options", 1)
        seen = set()
        known = _standard_headers(before, search, seen)
        late = _standard_headers(after, search, seen) - known - {"immintrin.h", "emmintrin.h"}
        assert not late, "%s: %s first included after its target pragma" % (
            source.relative_to(ROOT), sorted(late))
