"""Each public op of ``torch.ops.prefetch`` has its Python wrapper and its fake kernel in one module
(its family's: prefetch/ops/normalize.py, geometry.py, color.py, decode.py), and the fake is
registered once, by ``import prefetch.ops`` alone. The ops come from the dispatcher (what the
extension's schemas registered), the wrappers from ``prefetch.ops``, the fakes' files from torch's
registry of fake kernels, which records where each was registered."""
import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Public ops without a fake kernel, and why.
NO_FAKE = {"decode_jpeg": "its outputs' sizes are the decoded images', read from the encoded bytes: "
                          "no function of the inputs' shapes"}

_PROBE = """
import json, sys
import torch
import prefetch.ops
from torch._library.simple_registry import singleton

out = {}
for qualname in sorted(torch._C._dispatch_get_all_op_names()):
    namespace, _, op = qualname.partition("::")
    if namespace != "prefetch" or op.startswith("_"):
        continue
    wrapper = getattr(prefetch.ops, op, None)
    kernel = singleton.find(qualname).fake_impl.kernel
    out[op] = {"wrapper": getattr(wrapper, "__module__", None),
               "fake": kernel.source.rsplit(":", 1)[0] if kernel is not None else None}
json.dump(out, sys.stdout)
"""


def _registered():
    # A fresh interpreter: what `import prefetch.ops` registers, whatever this session imported.
    child = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                           cwd=ROOT, timeout=120)
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout)


def test_each_public_op_has_its_wrapper_and_its_fake_in_its_family_module():
    ops = _registered()
    assert {"normalize_flip", "resized_crop", "color_jitter", "jpeg_sizes"} <= set(ops)
    wrong = {}
    for op, found in ops.items():
        module = found["wrapper"]
        if module is None:
            wrong[op] = "no wrapper prefetch.ops.%s" % op
            continue
        if op in NO_FAKE:
            if found["fake"] is not None:
                wrong[op] = "a fake in %s, but NO_FAKE says %s" % (found["fake"], NO_FAKE[op])
            continue
        expected = ROOT / (module.replace(".", "/") + ".py")
        if found["fake"] is None or pathlib.Path(found["fake"]).resolve() != expected:
            wrong[op] = "wrapper in %s, fake in %s" % (module, found["fake"])
    assert wrong == {}


def test_each_fake_is_registered_once_in_the_package():
    counts = {}
    for path in sorted((ROOT / "prefetch").rglob("*.py")):
        for op in re.findall(r'register_fake\(\s*"prefetch::(\w+)"', path.read_text()):
            counts.setdefault(op, []).append(path.relative_to(ROOT).as_posix())
    assert counts, "no register_fake found: the fakes moved, update this test"
    assert {op: paths for op, paths in counts.items() if len(paths) != 1} == {}
    assert set(counts) == {op for op, found in _registered().items() if found["fake"] is not None}
