"""The files of an op, read from the real tree: each op lives in its own folders (csrc/kernels/<op>/,
csrc/torch/ops/<op>/), which hold its schema and both registrations; the files every op shares name
none of them; and docs/custom_ops.md's list of an op's files and of the shared files a new op
touches matches csrc/."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
KERNELS = ROOT / "csrc" / "kernels"
TORCH_OPS = ROOT / "csrc" / "torch" / "ops"

# The files that adding an op once touched, every op listed in each: now templates, registries and
# globs that name no op.
SHARED = ["csrc/build_config.txt", "setup.py", "CMakeLists.txt", "scripts/check_cuda_build.sh",
          "csrc/torch/ops/schemas.cpp", "csrc/torch/ops/kernel_args.h", "csrc/torch/ops/kernel_args.cpp",
          "csrc/torch/ops/cpu_registration.h", "csrc/torch/ops/cuda_registration.h",
          "csrc/torch/ops/kernel_args_hook.h", "csrc/torch/kernel_args_binding.cpp", "csrc/torch/module.cpp",
          "csrc/kernels/common/cpu_dispatch.h"]


def _section(title):
    text = (ROOT / "docs" / "custom_ops.md").read_text()
    start = text.index(title)
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _op_folders(parent):
    return sorted(d.name for d in parent.iterdir() if d.is_dir() and d.name != "common")


def _schema_names(op):
    """The names the op's folder defines in the prefetch library (histogram's op is `histograms`)."""
    text = (TORCH_OPS / op / (op + ".cpp")).read_text()
    return re.findall(r'm\.def\(\s*"(\w+)\(', text)


def test_every_kernel_folder_has_a_torch_folder_and_no_other():
    assert _op_folders(TORCH_OPS) == _op_folders(KERNELS)
    assert len(_op_folders(KERNELS)) >= 8


def test_each_op_folder_holds_its_schema_plan_and_both_registrations():
    for op in _op_folders(TORCH_OPS):
        folder = TORCH_OPS / op
        assert (folder / (op + "_plan.h")).is_file(), op
        own = (folder / (op + ".cpp")).read_text()
        names = _schema_names(op)
        assert len(names) == 1, (op, names)
        assert "TORCH_LIBRARY_FRAGMENT(prefetch, m)" in own, op
        assert re.search(r'TORCH_LIBRARY_IMPL\(prefetch, CPU, m\) \{ m\.impl\("%s"' % names[0], own), op
        assert "const KernelArgsHook" in own and '"_%s_kernel_args"' % op in own, op
        cuda = (folder / (op + "_cuda.cpp")).read_text()
        assert re.search(r'TORCH_LIBRARY_IMPL\(prefetch, CUDA, m\) \{ m\.impl\("%s"' % names[0], cuda), op
        # Only the CUDA file registers for CUDA, and nothing else in the folder defines a schema.
        assert "CUDA" not in re.findall(r"TORCH_LIBRARY_IMPL\(prefetch, (\w+)", own), op
        assert "m.def(" not in cuda, op


def test_no_shared_file_names_an_op():
    ops = _op_folders(TORCH_OPS)
    names = set(ops) | {n for op in ops for n in _schema_names(op)}
    word = re.compile(r"\b(%s)\b" % "|".join(sorted(names)))
    found = {path: sorted(set(word.findall((ROOT / path).read_text()))) for path in SHARED}
    assert {path: hit for path, hit in found.items() if hit} == {}


def test_the_files_of_an_op_are_the_ones_docs_custom_ops_lists():
    # normalize_flip has every kind of file an op can have; its names, with the op's name replaced
    # by <op>, must be the documented ones, and every documented file must exist.
    op = "normalize_flip"
    ops = _op_folders(KERNELS)
    named = set(re.findall(r"`([^`\s]+)`", _section("## Adding an op to prefetch itself")))

    def documented(path):
        name = path.name
        for o in ops:
            name = name.replace(o, "<op>")
        stem = name.rsplit(".", 1)[0]
        return bool({name, stem + ".h", path.relative_to(ROOT).as_posix()} & named)

    shared = [p for p in TORCH_OPS.iterdir() if p.is_file()]
    in_tree = [*(KERNELS / op).iterdir(), *(TORCH_OPS / op).iterdir(), *shared]
    assert [f.relative_to(ROOT).as_posix() for f in in_tree if not documented(f)] == []
    places = [ROOT, KERNELS, KERNELS / op, KERNELS / "common", TORCH_OPS, TORCH_OPS / op, ROOT / "tests" / "cpp"]
    # Paths and file names only: not the prose's "`_cpu_impl.h`" or "`.cu` file".
    files = [n.replace("<op>", op).rstrip("/") for n in named
             if re.search(r"^[A-Za-z<].*(\.(h|cpp|cu|py|txt)|/)$", n)]
    assert [n for n in files if not any((p / n).exists() for p in places)] == []


def test_docs_custom_ops_lists_at_most_three_shared_files_a_new_op_touches():
    section = _section("## Adding an op to prefetch itself")
    listed = section.split("<!-- shared files:", 1)[1].split("-->\n", 1)[1].split("\n\n", 1)[0]
    bullets = [b for b in ("\n" + listed).split("\n- ") if b.strip()]
    assert 1 <= len(bullets) <= 3, bullets
    for bullet in bullets:
        # The file, or where its content lives until it moves there (the bullet names both).
        paths = re.findall(r"`([^`\s]+\.(?:py|md))`", bullet)
        assert paths and any((ROOT / p).is_file() for p in paths), bullet
    # Every op is in each of them: they are where an op is named on purpose.
    for bullet in bullets:
        path = next(ROOT / p for p in re.findall(r"`([^`\s]+\.(?:py|md))`", bullet) if (ROOT / p).is_file())
        text = path.read_text()
        assert all(op in text for op in ("sharpness", "lookup", "affine_warp")), path


def _project_includes(path):
    return re.findall(r'^#include "([^"]+)"', path.read_text(), re.M)


def test_no_shared_header_is_first_compiled_inside_a_target_pragma():
    """An inline function with external linkage compiled in a baseline file and, first seen inside
    ``#pragma GCC target("avx2...")``, in an AVX2/AVX-512 file is one symbol with two bodies: the
    linker keeps either, and a CPU without AVX2 may run the AVX2 one (resized_crop_taps.h was, until
    2026-11-30). Every project header that such a file (or the ``*_cpu_impl.h`` it includes in the
    pragma) brings in must be included before the pragma, unless it has internal linkage
    (``namespace {``) or is the impl itself."""
    problems = []
    for path in sorted(KERNELS.glob("*/*_avx*.cpp")):
        text = path.read_text()
        cut = text.find("#pragma GCC target")
        assert cut > 0, path
        before = set(re.findall(r'^#include "([^"]+)"', text[:cut], re.M))
        inside = re.findall(r'^#include "([^"]+)"', text[cut:], re.M)
        seen = set()
        while inside:
            header = inside.pop()
            if header in seen:
                continue
            seen.add(header)
            source = KERNELS / header
            if header.endswith("_cpu_impl.h"):
                inside += _project_includes(source)
                continue
            if header in before or "namespace {" in source.read_text():
                continue
            problems.append("%s: %s first included inside the target pragma" % (path.relative_to(ROOT), header))
    assert problems == []


def test_no_source_includes_all_of_torch():
    """``ATen/ATen.h`` (every operator's declaration), ``torch/extension.h`` (that, the C++
    frontend and the Python bindings) and ``torch/python.h`` take 10.6, 14.9 and 10.8 s to parse
    per file on a CI core, most of each op file's compile: the extension's sources, and the
    custom-op example that docs/custom_ops.md holds up, include ``ATen/core/Tensor.h`` (the Tensor
    methods), the ``ATen/ops/<name>.h`` of each function they call, ``torch/library.h`` and, for
    the bindings, ``torch/csrc/utils/pybind.h`` (benchmarks/NOTES.md, "the extension's
    includes"). Any spelling of the include counts: quoted, indented, ``# include``."""
    heavy = re.compile(r'^\s*#\s*include\s*[<"](ATen/ATen\.h|torch/extension\.h|torch/all\.h|'
                       r'torch/torch\.h|torch/python\.h)[>"]', re.M)
    sources = [p for folder in (ROOT / "csrc", ROOT / "examples") for p in sorted(folder.rglob("*"))
               if p.suffix in (".h", ".cuh", ".cpp", ".cu")]
    assert any(p.parent.name == "custom_op" for p in sources)
    found = ["%s: %s" % (p.relative_to(ROOT), m.group(1)) for p in sources for m in heavy.finditer(p.read_text())]
    assert found == []
    assert heavy.search('  # include "torch/extension.h"\n')  # the pattern sees other spellings
