"""Every test the docs name exists where they say: each promise in docs/reliability.md names the
test that proves it, and a moved or renamed test would otherwise leave a claim that nothing
checks (when tests/ was regrouped by feature, every doc that named a test named a path that no
longer existed). Paths in the scripts that select tests are checked too: pytest ignores an
--ignore of a path that does not exist, so a stale one in .ci/run would silently run what it
meant to leave out."""
import ast
import functools
import glob
import os
import re

import pytest

from .helpers import ROOT

DOCS = sorted(["README.md"] + glob.glob("docs/*.md", root_dir=ROOT)
              + glob.glob("benchmarks/*.md", root_dir=ROOT))
SCRIPTS = sorted([".ci/run", "benchmarks/gpu_check.sh"] + glob.glob("scripts/*.sh", root_dir=ROOT)
                 + glob.glob("benchmarks/gpu/*.py", root_dir=ROOT))

# tests/<path>, optionally ::name or :name (a test, or a helper the docs point to).
PATH = re.compile(r"tests/[\w/.*-]*[\w*](?:(?:::|:)(\w+))?")
# A test named without its file, in backticks: `test_...`.
BARE = re.compile(r"`(test_\w+)`")
# A test file named without its folder: `test_x.py`.
BARE_FILE = re.compile(r"(?<![\w/])(test_\w+\.py)")
# Names of the form test_* that are not tests: Lightning's hooks and arguments.
NOT_TESTS = {"test_transform", "test_dataloader", "test_step"}


@functools.lru_cache(maxsize=None)
def defined(path):
    """The names a Python file defines at module level (and its classes' methods)."""
    tree = ast.parse(open(os.path.join(ROOT, path)).read())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                names.update(n.name for n in node.body if isinstance(n, ast.FunctionDef))
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def files_of_tests():
    return sorted(os.path.relpath(os.path.join(folder, name), ROOT)
                  for folder, _, files in os.walk(os.path.join(ROOT, "tests"))
                  for name in files if name.startswith("test_") and name.endswith(".py"))


def problems(text, known_files):
    """What is wrong with the test references in `text` (a document's contents)."""
    found = []
    named = []  # the Python test files named so far in the current ## section
    for line_no, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            named = []
        for match in PATH.finditer(line):
            path, name = match.group(0), match.group(1)
            if name:
                path = path[:-len(name)].rstrip(":")
            if not glob.glob(os.path.join(ROOT, path)):
                found.append("line %d: %s does not exist" % (line_no, path))
                continue
            if path.endswith(".py"):
                named.append(path)
                if name and name not in defined(path):
                    found.append("line %d: %s defines no %s" % (line_no, path, name))
        for match in BARE_FILE.finditer(line):
            if not any(os.path.basename(f) == match.group(1) for f in known_files):
                found.append("line %d: no tests/**/%s" % (line_no, match.group(1)))
        for match in BARE.finditer(line):
            name = match.group(1)
            if name in NOT_TESTS:
                continue
            if not any(name in defined(p) for p in named):
                found.append("line %d: %s is in none of the files this section named before it (%s)"
                             % (line_no, name, ", ".join(named) or "none"))
    return found


@pytest.mark.parametrize("doc", DOCS + SCRIPTS)
def test_every_test_a_document_names_exists_where_it_says(doc):
    found = problems(open(os.path.join(ROOT, doc)).read(), files_of_tests())
    assert not found, "\n".join(found)


def test_the_check_finds_what_has_rotted():
    files = files_of_tests()
    text = ("## A\n`tests/engine/test_errors.py::test_next_epoch_works_after_a_source_error`, "
            "`test_a_failed_epoch_leaves_nothing_alive`\n")
    assert problems(text, files) == []
    assert problems("## A\n`tests/test_errors_and_shutdown.py`\n", files) == [
        "line 2: tests/test_errors_and_shutdown.py does not exist"]
    assert problems("## A\ntests/engine/test_errors.py::test_gone\n", files) == [
        "line 2: tests/engine/test_errors.py defines no test_gone"]
    # A bare name belongs to a file its section named before it; the next section starts afresh.
    assert problems(text + "## B\n`test_a_failed_epoch_leaves_nothing_alive`\n", files) == [
        "line 4: test_a_failed_epoch_leaves_nothing_alive is in none of the files this section "
        "named before it (none)"]
    assert problems("the `test_hardening_ops.py` file\n", files) == ["line 1: no tests/**/test_hardening_ops.py"]
    assert problems("`tests/helpers.py::run_child`, `tests/cpp/size_overflow_*`, "
                    "tests.bench_loaders, `test_transform=`\n", files) == []


# The figures' sources (issue 44 item 6: README and docs cite benchmarks/results/*.json for
# figures): a results file the docs name, in full (`benchmarks/results/x.json`, a glob such as
# `benchmarks/results/h200-2026-11-27*`, a chart in a Markdown image) or bare in backticks by its
# machine-date name (`cpu-2core-2026-11-27-recipes.json`, `h200-2026-11-26*`). A sentence's full
# stop is not part of the name.
RESULTS_DOCS = sorted(["README.md"] + glob.glob("docs/*.md", root_dir=ROOT))
RESULT_PATH = re.compile(r"benchmarks/results/([\w*-]+(?:\.[\w*-]+)*)")
RESULT_BARE = re.compile(r"`([\w-]+-\d{4}-\d\d-\d\d[\w*-]*(?:\.[\w*-]+)*)`")


def missing_results(text):
    """The results files named in `text` (a document's contents) that benchmarks/results lacks."""
    found = []
    for line_no, line in enumerate(text.splitlines(), 1):
        names = [m.group(1) for m in RESULT_PATH.finditer(line)]
        names += [m.group(1) for m in RESULT_BARE.finditer(line)]
        for name in names:
            if not glob.glob(os.path.join(ROOT, "benchmarks", "results", name)):
                found.append("line %d: benchmarks/results/%s does not exist" % (line_no, name))
    return found


@pytest.mark.parametrize("doc", RESULTS_DOCS)
def test_every_results_file_a_document_cites_exists(doc):
    found = missing_results(open(os.path.join(ROOT, doc)).read())
    assert not found, "\n".join(found)


def test_the_results_check_finds_a_missing_file():
    real = ("figures in `benchmarks/results/cpu-2core-2026-11-21.json`.\n"
            "![e2e](benchmarks/results/cpu-2core-2026-11-21-e2e.png), all of "
            "`benchmarks/results/h200-2026-11-27*`, the first run's in `h200-2026-11-26*`\n")
    assert missing_results(real) == []
    assert missing_results("(`benchmarks/results/cpu-2core-2026-11-30-made-up.json`).\n") == [
        "line 1: benchmarks/results/cpu-2core-2026-11-30-made-up.json does not exist"]
    assert missing_results("x\n![c](benchmarks/results/h200-2026-11-27-made-up.png)\n") == [
        "line 2: benchmarks/results/h200-2026-11-27-made-up.png does not exist"]
    assert missing_results("the table `h200-2026-11-27-made-up-table.md`, runs in `h100-2026-12-01*`\n") == [
        "line 1: benchmarks/results/h200-2026-11-27-made-up-table.md does not exist",
        "line 1: benchmarks/results/h100-2026-12-01* does not exist"]
