"""The package's layout holds: no import cycle among its modules (the module-level import graph,
read statically, and every module imported in a fresh interpreter in sorted and in reverse order,
so no cycle hides behind the order prefetch/__init__ happens to import in); the documented module
paths keep working; importing prefetch imports none of its optional integrations;
(docs/custom_ops.md's list of an op's files: tests/test_op_files.py.)"""
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "prefetch"


def _modules():
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
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


def import_cycles(modules, root):
    """The cycles of the module-level import graph of ``modules`` (dotted names of files under
    ``root``), each as a list of names that ends where it starts."""
    import ast

    known = set(modules)
    graph = {}
    for name in modules:
        path = root / (name.replace(".", "/") + ".py")
        if not path.exists():
            path = root / name.replace(".", "/") / "__init__.py"
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps = set()
        for node in ast.parse(path.read_text()).body:  # module level: a function's import runs later
            if isinstance(node, ast.ImportFrom):
                target = node.module or ""
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:  # "from pkg import submodule" depends on the submodule
                    full = target + "." + alias.name
                    deps.add(full if full in known else target)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        graph[name] = {d for d in deps if d in known and d != name}
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


def test_the_cycle_finder_finds_a_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("from . import c\nx = 1\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    assert import_cycles(["pkg", "pkg.a", "pkg.b", "pkg.c"], tmp_path) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def test_no_module_imports_a_module_that_imports_it_back():
    assert import_cycles(MODULES, ROOT) == []


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
