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
import sys

import pytest
import torch

from .helpers import ROOT

DOCS = sorted(["README.md", "CONTRIBUTING.md"] + glob.glob("docs/*.md", root_dir=ROOT)
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
RESULTS_DOCS = sorted(["README.md", "CONTRIBUTING.md"] + glob.glob("docs/*.md", root_dir=ROOT))
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


# --- the examples run as written -----------------------------------------------------------------
# Every ```python block of the README, CONTRIBUTING.md and docs/*.md compiles, and runs as
# written, in order, in one namespace per document (as a reader reads the page), from a fresh
# folder holding the files the examples open. The names an example uses without defining them
# are the reader's own (their dataset, their model, their JPEG files): EXAMPLE_NAMES gives small
# stand-ins. A block that cannot run here says why on the line above its fence:
# `<!-- not run: the reason -->` (it is still compiled). docs/custom_ops.md's examples are run by
# the tests that read that page (tests/transforms/test_contract.py); here they are compiled.
EXAMPLE_DOCS = sorted(["README.md", "CONTRIBUTING.md"] + glob.glob("docs/*.md", root_dir=ROOT))
COMPILED_ONLY = {"docs/custom_ops.md"}
NOT_RUN = re.compile(r"<!--\s*not run[^:]*:\s*(.*?)\s*-->")


def examples(text):
    """The fenced blocks of a Markdown text: [(line of the fence, language, code, reason)], the
    reason being the text of a `<!-- not run: ... -->` comment among the comment lines right
    above the fence, else None."""
    found, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        start, language = i, lines[i][3:].strip()
        reason, above = None, start - 1
        while above >= 0 and lines[above].lstrip().startswith("<!--"):
            match = NOT_RUN.search(lines[above])
            reason = match.group(1) if match else reason
            above -= 1
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            i += 1
        found.append((start + 1, language, "\n".join(lines[start + 1:i]) + "\n", reason))
        i += 1
    return found


def test_the_examples_are_found_with_their_reasons():
    text = ("# T\n```python\na = 1\n```\ntext\n<!-- not run: needs a cluster -->\n```python\n"
            "b = 2\n```\n<!-- not run here: elsewhere -->\n<!-- marker: begin -->\n```python\nc\n```\n"
            "```bash\nls\n```\n")
    assert examples(text) == [(2, "python", "a = 1\n", None),
                              (7, "python", "b = 2\n", "needs a cluster"),
                              (12, "python", "c\n", "elsewhere"),
                              (15, "bash", "ls\n", None)]


class ExampleImages(torch.utils.data.Dataset):
    """The reader's dataset: `count` random uint8 images [size, size, 3] (HWC) and int labels.
    At module level so that DataLoader workers started by a forkserver can unpickle it."""

    def __init__(self, count, size):
        self.count, self.size = count, size

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randint(0, 256, (self.size, self.size, 3), dtype=torch.uint8, generator=g), i % 10


def _example_model(images):
    """The reader's model: anything that takes the batch's images."""
    return images.float().mean()


def example_names(folder):
    """The stand-ins for the reader's own names, and the files the examples open, in `folder`."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    np.save(folder / "train_u8.npy", rng.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8))
    np.save(folder / "train_labels.npy", np.arange(64))
    np.save(folder / "cifar_train_u8.npy", rng.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8))
    np.save(folder / "cifar_train_labels.npy", np.arange(64))
    jpeg_paths = []
    for k in range(8):
        label = k % 2
        path = folder / "imagenet" / "train" / ("class%d" % label) / ("%d.jpg" % k)
        path.parent.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (240 + 8 * k, 256 - 4 * k, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path, quality=90)
        jpeg_paths.append(str(path))
    return {"dataset": ExampleImages(16, 256), "model": _example_model,
            "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225),
            "epochs": 2, "start_epoch": 0,
            "jpeg_paths": jpeg_paths, "jpeg_labels": [k % 2 for k in range(8)]}


@pytest.mark.parametrize("doc", EXAMPLE_DOCS)
def test_every_python_example_of_a_document_runs_as_written(doc, tmp_path, monkeypatch):
    import prefetch

    blocks = [b for b in examples(open(os.path.join(ROOT, doc)).read()) if b[1] == "python"]
    code = [(line, compile(text, "%s:%d" % (doc, line), "exec"), text, reason)
            for line, _, text, reason in blocks]
    if doc in COMPILED_ONLY:
        return
    monkeypatch.chdir(tmp_path)
    namespace = example_names(tmp_path)
    for line, compiled, text, reason in code:
        if reason is not None:
            continue
        if "decode=True" in text and not prefetch.built_with_jpeg():
            pytest.skip("%s:%d decodes JPEGs; this build has no JPEG decoder" % (doc, line))
        exec(compiled, namespace)


# --- the README stays short and every page it links exists -------------------------------------
LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#([^)\s]+))?\)")
LINKED_DOCS = sorted(["README.md", "CONTRIBUTING.md"] + glob.glob("docs/*.md", root_dir=ROOT))


def anchors(path):
    """The anchors GitHub gives a Markdown file's headings: lower case, spaces as hyphens, other
    punctuation dropped (a heading repeated gets -1, -2, ...)."""
    seen, found = {}, set()
    for line in open(path).read().splitlines():
        match = re.match(r"#{1,6} (.*)", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
        found.add(slug if slug not in seen else "%s-%d" % (slug, seen[slug]))
        seen[slug] = seen.get(slug, 0) + 1
    return found


def broken_links(doc):
    """The links to Markdown pages in `doc` (a path under ROOT) whose page or heading is missing."""
    found = []
    folder = os.path.dirname(os.path.join(ROOT, doc))
    for line_no, line in enumerate(open(os.path.join(ROOT, doc)).read().splitlines(), 1):
        for match in LINK.finditer(line):
            target, anchor = match.group(1), match.group(2)
            if "://" in target:
                continue
            path = os.path.normpath(os.path.join(folder, target))
            if not os.path.exists(path):
                found.append("line %d: %s does not exist" % (line_no, target))
            elif anchor and anchor not in anchors(path):
                found.append("line %d: %s has no heading #%s" % (line_no, target, anchor))
    return found


def test_the_readme_is_read_in_five_minutes():
    with open(os.path.join(ROOT, "README.md")) as f:
        count = len(f.read().splitlines())
    assert count <= 300, "README.md is %d lines; move the detail to docs/ (at most 300)" % count


@pytest.mark.parametrize("doc", LINKED_DOCS)
def test_every_page_a_document_links_exists(doc):
    found = broken_links(doc)
    assert not found, "\n".join(found)


def test_the_readme_links_every_docs_page():
    text = open(os.path.join(ROOT, "README.md")).read()
    pages = glob.glob("docs/*.md", root_dir=ROOT) + ["CONTRIBUTING.md"]
    assert [p for p in sorted(pages) if "(%s)" % p not in text] == []


def test_the_link_check_finds_a_missing_page_and_heading(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n## The `x.y` part: one\n## Twice\n## Twice\n")
    (tmp_path / "R.md").write_text("[a](docs/a.md#the-xy-part-one) [b](docs/b.md) "
                                   "[c](docs/a.md#gone) [d](docs/a.md#twice-1) [w](https://x.org/y.md)\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    assert broken_links("R.md") == ["line 1: docs/b.md does not exist",
                                    "line 1: docs/a.md has no heading #gone"]


# --- no stale module names, no claim that the fused kernels are missing -----------------------
STALE = ("prefetch._pipeline", "prefetch._resume", "prefetch._tree", "prefetch/_pipeline",
         "prefetch/_resume", "prefetch/_tree", "prefetch/_worker_ring")


@pytest.mark.parametrize("doc", LINKED_DOCS)
def test_no_document_names_a_module_that_no_longer_exists(doc):
    text = open(os.path.join(ROOT, doc)).read()
    assert [name for name in STALE if name in text] == []


# --- figures cite their results files; the lab notebook tells the story -------------------------
def notebook_citations(text):
    """The lines of `text` that name benchmarks/NOTES.md without calling it the lab notebook in
    the same sentence (its neighbourhood): a figure's authority is its results file."""
    found = []
    for match in re.finditer(r"NOTES\.md", text):
        around = " ".join(text[max(0, match.start() - 160):match.end() + 80].split())
        if "lab notebook" not in around:
            found.append("line %d: NOTES.md cited as a source; cite benchmarks/results/*.json "
                         "(the lab notebook may tell the story)" % (text.count("\n", 0, match.start()) + 1))
    return found


@pytest.mark.parametrize("doc", LINKED_DOCS)
def test_no_document_cites_the_lab_notebook_as_a_figures_source(doc):
    found = notebook_citations(open(os.path.join(ROOT, doc)).read())
    assert not found, "\n".join(found)


def test_no_code_cites_the_lab_notebook_as_a_figures_source():
    """The code's comments name the command that measures a figure (or its results file), not
    the lab notebook: the notebook is a story in date order, the command reproduces the figure."""
    found = []
    for top in ("prefetch", "csrc", "scripts", "examples"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith((".py", ".cpp", ".h", ".cu", ".cuh", ".sh")):
                    path = os.path.join(folder, name)
                    for line in notebook_citations(open(path, errors="replace").read()):
                        found.append("%s %s" % (os.path.relpath(path, ROOT), line))
    assert not found, "\n".join(found)


def test_the_notebook_check_finds_a_bare_citation():
    assert notebook_citations("ratio 5.0–6.6 (benchmarks/NOTES.md).\n") == [
        "line 1: NOTES.md cited as a source; cite benchmarks/results/*.json (the lab notebook may "
        "tell the story)"]
    assert notebook_citations("x\n(`a.json`; the lab notebook, benchmarks/NOTES.md, tells it)\n") == []


def test_the_lab_notebooks_topic_index_reaches_every_section():
    """benchmarks/NOTES.md is in date order; its topic index at the top links every section, and
    every link lands on a heading."""
    path = os.path.join(ROOT, "benchmarks", "NOTES.md")
    text = open(path).read()
    index = text[text.index("## Topic index"):text.index("\n## ", text.index("## Topic index") + 1)]
    linked = set(re.findall(r"\]\(#([^)\s]+)\)", index))
    sections = [h for h in re.findall(r"^## (.*)$", text, re.M) if h != "Topic index"]
    assert linked <= anchors(path), sorted(linked - anchors(path))
    slugs = [re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in sections]
    assert [h for h, s in zip(sections, slugs) if s not in linked] == []
    assert broken_links("benchmarks/NOTES.md") == []


# --- the README's figures are its results files' -------------------------------------------------
FIGURE_ROW = re.compile(r"^\|(.*)\|(.*)\|\s*\[[^]]*\]\((benchmarks/results/[^)]+\.json)\)(.*)\|\s*$")


def figure_mismatches(text):
    """The README's figures rows whose ratios (each `N×` before any parenthesis, then those inside
    it, in order) differ from the metrics the row names (`name`, in the results file it links),
    beyond the rounding of the digits printed."""
    import json

    found = []
    for line_no, line in enumerate(text.splitlines(), 1):
        match = FIGURE_ROW.match(line)
        if not match:
            continue
        cell, path, names = match.group(2), match.group(3), re.findall(r"`(\w+)`", match.group(4))
        shown = re.findall(r"(\d+(?:\.\d+)?)×", re.sub(r"in the run before[^)]*", "", cell))
        if not names or len(shown) < len(names):
            found.append("line %d: name a metric for each figure" % line_no)
            continue
        metrics = json.load(open(os.path.join(ROOT, path)))["metrics"]
        for figure, name in zip(shown, names):
            places = len(figure.split(".")[1]) if "." in figure else 0
            if name not in metrics or abs(metrics[name] - float(figure)) > 0.5 * 10 ** -places + 1e-9:
                found.append("line %d: %s× but %s is %s in %s"
                             % (line_no, figure, name, metrics.get(name), path))
    return found


def test_the_readmes_figures_are_those_of_the_results_files_it_links():
    text = open(os.path.join(ROOT, "README.md")).read()
    assert len([l for l in text.splitlines() if FIGURE_ROW.match(l)]) >= 5
    found = figure_mismatches(text)
    assert not found, "\n".join(found)


def test_the_figures_check_finds_a_figure_its_file_does_not_hold():
    row = ("| x | %s | [f](benchmarks/results/h200-2026-11-27.json) `h2d_vs_pin_memory` |\n")
    assert figure_mismatches(row % "0.66×") == []
    assert figure_mismatches(row % "0.7×") == []
    assert figure_mismatches(row % "0.64×") == [
        "line 1: 0.64× but h2d_vs_pin_memory is 0.6557680155777017 in benchmarks/results/h200-2026-11-27.json"]
