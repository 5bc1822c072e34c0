"""Builds the example op with torch.utils.cpp_extension.load (JIT), registers its fake kernel,
and checks it against a pure-torch reference with torch.library.opcheck.

    python examples/custom_op/run.py
"""
import os

import torch
from torch.utils.cpp_extension import load

HERE = os.path.dirname(os.path.abspath(__file__))
with_cuda = torch.cuda.is_available() and torch.version.cuda is not None
load(
    name="example_ops_ext",
    sources=[os.path.join(HERE, "ops.cpp")] + ([os.path.join(HERE, "posterize.cu")] if with_cuda else []),
    extra_cflags=["-O3"] + (["-DWITH_CUDA"] if with_cuda else []),
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


@torch.library.register_fake("example_ops::posterize")
def _(images, bits):
    return images.new_empty(images.shape, dtype=torch.float32)


def reference(images, bits):
    mask = (0xFF << (8 - bits)) & 0xFF
    return (images.to(torch.int64) & mask).to(torch.float64) / 255


if __name__ == "__main__":
    devices = ["cpu"] + (["cuda"] if with_cuda else [])
    for device in devices:
        x = torch.randint(0, 256, (4, 3, 17, 9), dtype=torch.uint8, device=device)
        out = torch.ops.example_ops.posterize(x, 3)
        assert torch.allclose(out.double(), reference(x, 3), atol=1e-7), "mismatch on %s" % device
        torch.library.opcheck(torch.ops.example_ops.posterize.default, (x, 3))
        print("posterize ok on", device)
