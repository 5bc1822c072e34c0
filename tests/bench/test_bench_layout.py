"""The bench package's imports, read from the real tree (every import statement, those inside
functions included): no module of ``prefetch.bench`` imports, directly or through others, one
that imports it back, and the shared constants sit at the bottom (``constants`` imports nothing
of the package)."""
import ast
import os

import prefetch.bench

BENCH = os.path.dirname(prefetch.bench.__file__)
PACKAGE = "prefetch.bench"


def bench_modules():
    return sorted(f[:-3] for f in os.listdir(BENCH) if f.endswith(".py"))


def imported(module, modules):
    """The modules of the package that ``module``'s source imports, anywhere in it."""
    with open(os.path.join(BENCH, module + ".py")) as f:
        tree = ast.parse(f.read())
    out = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level == 1:
                names = [base] if base else [a.name for a in node.names]
            elif node.level == 0 and (base == PACKAGE or base.startswith(PACKAGE + ".")):
                rest = base[len(PACKAGE) + 1:]
                names = [rest] if rest else [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name[len(PACKAGE) + 1:] for a in node.names
                     if a.name.startswith(PACKAGE + ".")]
        out.update(n.split(".")[0] for n in names)
    return {m for m in out if m in modules and m != module}


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_reader_sees_imports_inside_functions_and_finds_a_cycle():
    # The check's own reference: a function-level import closes a cycle the module level lacks.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []
    modules = bench_modules()
    # decode_host imports write_jpegs inside its measure(): the walk must see it.
    assert "datasets" in imported("decode_host", modules)


def test_bench_has_no_import_cycle():
    modules = bench_modules()
    graph = {m: imported(m, modules) for m in modules}
    assert cycles(graph) == []


def test_shared_constants_and_datasets_sit_low_in_the_package():
    modules = bench_modules()
    assert imported("constants", modules) == set()
    assert imported("datasets", modules) == {"constants"}
    # The rival pipelines build on the datasets, never on a section.
    assert imported("pipelines", modules) <= {"constants", "datasets", "section", "collate"}
    assert "workers" not in set().union(*(imported(m, modules) for m in modules if m != "__main__"))
