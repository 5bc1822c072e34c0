"""The GPU JPEG path's host CPU per image before and after issue 44 item 4, in alternating processes.

    python benchmarks/decode_host_before_after.py --before /tmp/before-tree --rounds 5

``--before``: a checkout of the code before the change (``git worktree add /tmp/before-tree
<commit>``) whose ``prefetch/`` Python runs against this checkout's built extension (the
extension's decode ops are the same on both sides; the new ops are only called by the new code):
this script links ``prefetch/_C*.so`` into it when it has none. Each round runs one process on the
old code and one on the new (A, B, A, B, ...): each builds the same batches of a store (written
once, ``prefetch.bench.workers.write_jpegs``, ~500x375 photos of ~105 kB) and times, with
``time.process_time()``, passes over them of what a producer does on the host for a GPU decoder:
``host_batch`` (the store's encoded bytes gathered) and ``FusedAugment.decode_on_host`` on the meta
device with a fake GPU decoder that decodes nothing. The fake's own CPU time is measured inside it
and subtracted (the old interface wants one HWC tensor per image: the old fake makes them in a
Python loop; the new one is prefetch's ``FakeGpuBackend(pixels=False)``). Prints the median and
range over rounds of each process's median pass, in µs an image.
"""
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch
import prefetch
from prefetch._core.tree import Leaf, PreparedBatch, flatten, host_batch, ragged_fields
from prefetch.ops import decode, gpu_decoders
from prefetch.store import mapped_file
from prefetch.transforms import BatchPosition
from prefetch.transforms import resizing

torch.set_num_threads(int(sys.argv[4]))
store = prefetch.open_store(sys.argv[2])
batch_size, passes = int(sys.argv[3]), int(sys.argv[5])
assert prefetch.__file__.startswith(sys.argv[1]), prefetch.__file__

# The ArrayLoader's host-path batches (prefetch/bench/decode_host.py's store_batches; inline: the
# old tree has no such module).
spec, leaves, _ = flatten((store.images, store.labels))
spec, groups = ragged_fields(spec)
(va, oa, sa), = groups
values, offsets, sizes = leaves[va].value, leaves[oa].value, leaves[sa].value
counts = sizes.prod(1)
guard = mapped_file(values).leaf_guard()
batches = []
for b in range(len(store) // batch_size):
    idx = torch.arange(b * batch_size, (b + 1) * batch_size)
    leaf = [Leaf(l.name, l.value, idx) for l in leaves]
    c = counts[idx]
    leaf[va] = Leaf(leaves[va].name, values, torch.stack((offsets[idx], c), 1), guard)
    leaf[oa] = Leaf(leaves[oa].name, torch.cumsum(c, 0) - c)
    leaf[sa] = Leaf(leaves[sa].name, sizes, idx)
    batches.append(PreparedBatch(spec, leaf, []))

fake_s = [0.0]
if hasattr(gpu_decoders, "FakeGpuBackend"):  # after: prefetch's own fake, registered
    side = "after"
    class Timed(gpu_decoders.FakeGpuBackend):
        def decode_batch(self, images, device):
            t0 = time.process_time()
            out = super().decode_batch(images, device)
            fake_s[0] += time.process_time() - t0
            return out
    fake = Timed(pixels=False)
    gpu_decoders.BACKENDS = [fake, gpu_decoders.CpuBackend()]
    gpu_decoders.clear_cache()
else:  # before: the old interface (one HWC tensor per image), its GPU path reached on meta
    side = "before"
    # Each file's size by its byte length (unique in this store: checked), read once here, so
    # that the fake's own work is a lookup and an empty meta tensor per image.
    lengths = store.images.sizes[:, 0].tolist()
    assert len(set(lengths)) == len(lengths), "two files of one length: make another store"
    hw_of = dict(zip(lengths, torch.ops.prefetch.jpeg_sizes(
        store.values, store.images.offsets, store.images.sizes)[:, :2].tolist()))
    class Timed(gpu_decoders.GpuJpegBackend):
        name = "fake"
        def _load(self):
            return None
        def decode_batch(self, images, device):
            t0 = time.process_time()
            out = [torch.empty(hw_of[t.numel()] + [3], dtype=torch.uint8, device=device) for t in images]
            fake_s[0] += time.process_time() - t0
            return out
    fake = Timed()
    gpu_decoders.BACKENDS = [fake, gpu_decoders.CpuBackend()]
    gpu_decoders.clear_cache()
    resizing.gpu_jpeg_decoder = lambda: "fake"
    resizing.decode_jpeg = lambda data, boxes, device, header_sizes: decode._decode_with_backend(
        decode.encoded_batch(data), boxes, device, fake)

aug = prefetch.FusedAugment((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), random_resized_crop=224,
                            decode=True, seed=0)
meta = torch.device("meta")

def one_pass():
    for i, b in enumerate(batches):
        out = aug.decode_on_host(host_batch(b), BatchPosition(0, i, 0), meta)
    return out

out = one_pass()  # warm-up
windows = out[0].windows
assert windows.values.device == meta and len(windows) == batch_size
totals, fakes = [], []
for _ in range(passes):
    fake_s[0] = 0.0
    t0 = time.process_time()
    one_pass()
    totals.append(time.process_time() - t0)
    fakes.append(fake_s[0])
images = len(batches) * batch_size
print(json.dumps({"side": side, "us_per_image": [t * 1e6 / images for t in totals],
                  "fake_us_per_image": [f * 1e6 / images for f in fakes]}))
'''


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="a checkout of the code before the change")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--passes", type=int, default=5, help="timed passes per process (median taken)")
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads (N)")
    args = p.parse_args()
    before = os.path.abspath(args.before)
    if not glob.glob(os.path.join(before, "prefetch", "_C*.so")):
        for so in glob.glob(os.path.join(HERE, "prefetch", "_C*.so")):
            os.symlink(so, os.path.join(before, "prefetch", os.path.basename(so)))
    sys.path.insert(0, HERE)
    import prefetch
    from prefetch.bench.workers import write_jpegs

    root = tempfile.mkdtemp(prefix="decode-host-ab-")
    try:
        os.makedirs(os.path.join(root, "files", "a"))
        write_jpegs(os.path.join(root, "files", "a"), args.images)
        store = os.path.join(root, "store")
        prefetch.pack(os.path.join(root, "files"), store)
        results = {"before": [], "after": []}
        for r in range(args.rounds):
            for tree in (before, HERE):
                out = subprocess.run([sys.executable, "-c", CHILD, tree, store, str(args.batch_size),
                                      str(args.threads), str(args.passes)],
                                     capture_output=True, text=True, check=True)
                got = json.loads(out.stdout.strip().splitlines()[-1])
                total = statistics.median(got["us_per_image"])
                fake = statistics.median(got["fake_us_per_image"])
                results[got["side"]].append((total - fake, total, fake))
                print("round %d %-6s %.1f us/image (fake decoder %.1f of %.1f)"
                      % (r, got["side"], total - fake, fake, total), flush=True)
        for side in ("before", "after"):
            net = [x[0] for x in results[side]]
            fake = [x[2] for x in results[side]]
            print("%-6s %.1f (%.1f-%.1f) us/image of main-process CPU, fake decoder's own %.1f "
                  "subtracted" % (side, statistics.median(net), min(net), max(net), statistics.median(fake)))
        ratios = [b[0] / a[0] for b, a in zip(results["before"], results["after"])]
        print("before / after, per round: %.1f (%.1f-%.1f)" % (statistics.median(ratios), min(ratios),
                                                              max(ratios)))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
