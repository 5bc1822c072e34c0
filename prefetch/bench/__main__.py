"""python -m prefetch.bench: measures prefetch against the alternatives and the machine's limit,
in the same run, and writes a table and results.json."""
import argparse
import datetime
import json
import os
import platform
import sys
import time

import torch

import prefetch

from . import arrays, collate, e2e, h2d, ops

SECTIONS = {
    "collate": "samples -> engine -> ring, vs default_collate and a plain copy",
    "h2d": "host -> device through the ring, vs pin_memory().to() and raw pinned copies (GPU)",
    "ops": "fused normalize/flip/crop vs the torch op chain and a copy of the same bytes",
    "e2e": "a training loop fed by each pipeline, vs the same batches already on the device",
    "arrays": "ArrayLoader vs DataLoader over the same uint8 arrays; device-resident batches vs copy",
}
PLANNED = ()


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m prefetch.bench", description=__doc__)
    p.add_argument("--sections", default="collate,h2d,ops,arrays,e2e",
                   help="comma-separated: %s" % ", ".join(list(SECTIONS) + list(PLANNED)))
    p.add_argument("--quick", action="store_true", help="small run (well under a minute on 2 cores)")
    p.add_argument("--device", default=None, help="target device (default: cuda if available, else cpu)")
    p.add_argument("--batch-size", type=int, action="append", dest="batch_sizes",
                   help="images per batch (repeatable; default 64 and 256)")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes in e2e (default 2)")
    p.add_argument("--threads", type=int, default=None, help="engine collation threads (default: cores, <= 8)")
    p.add_argument("--steps", type=int, default=None, help="training steps per e2e pipeline")
    p.add_argument("--out", default="bench-out", help="directory for results.json")
    return p.parse_args(argv)


def progress(msg):
    print("  .. %s" % msg, flush=True)


def device_name(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu (%s, %d cores)" % (platform.processor() or platform.machine(), os.cpu_count() or 1)


def print_collate_table(rows):
    head = ("batch", "MiB", "thr", "engine GB/s", "copy GB/s", "default_collate GB/s (best)",
            "engine/copy", "engine/default")
    print("\ncollate (uint8 %dx%dx3 images)" % (rows[0]["image_size"], rows[0]["image_size"]))
    print("  " + " | ".join(head))
    for r in rows:
        print("  " + " | ".join([
            "%5d" % r["batch_size"], "%5.1f" % r["batch_mib"], "%3d" % r["num_threads"],
            "%11.2f" % r["collate_gbps"], "%9.2f" % r["copy_gbps"],
            "%11.2f (%.2f)" % (r["default_collate_gbps"], r["default_collate_best_gbps"]),
            "%11.2f" % r["collate_fraction_of_copy"], "%14.1f" % r["collate_vs_default_collate"],
        ]))


def print_ops_table(rows, n, size):
    print("\nops (%d uint8 %dx%dx3 images, crop %d, padding 4, random flips)" % (n, size, size, size))
    print("  dtype     layout          | fused GB/s | copy GB/s | chain GB/s | fused/copy | fused/chain")
    for r in rows:
        print("  %-9s %-15s | %10.2f | %9.2f | %10.3f | %10.3f | %11.1f" % (
            r["dtype"], "channels_last" if r["channels_last"] else "contiguous", r["ops_gbps"],
            r["copy_gbps"], r.get("chain_gbps", float("nan")), r["ops_fraction_of_copy"],
            r.get("ops_vs_torch_chain", float("nan"))))


def print_e2e_table(result):
    c = result["config"]
    print("\ne2e (uint8 images, %d DataLoader workers)" % c["workers"])
    print("  model       batch x size  pipeline  | images/s | step ms | waiting for data")
    for model, rows in result["results"].items():
        shape = c["shapes"][model]
        for name, r in rows.items():
            print("  %-11s %5d x %-5d %-9s | %8.0f | %7.1f | %5.1f%%" % (
                model, shape["batch_size"], shape["image_size"], name, r["img_per_s"],
                r["step_s"] * 1e3, 100 * r["wait_fraction"]))


def print_arrays_table(r):
    print("\narrays (%d uint8 %dx%dx3 images, batch %d)" % (
        r["num_images"], r["image_size"], r["image_size"], r["batch_size"]))
    loaders = [("ArrayLoader host", r["host_img_per_s"])] + [
        ("DataLoader %s workers" % k.split("_")[1][:-1], v) for k, v in r.items()
        if k.startswith("dataloader_")]
    for name, rate in loaders:
        print("  %-22s | %10.0f images/s | %6.1f batches/s" % (name, rate, rate / r["batch_size"]))
    print("  ArrayLoader host / best DataLoader: %.1fx" % r["arrays_vs_dataloader"])
    print("  ArrayLoader device + FusedAugment: %.0f images/s (%.1f batches/s), %.2f of the kernel's rate"
          % (r["device_img_per_s"], r["device_batches_per_s"], r["device_loop_fraction_of_kernel"]))
    print("  fused gather kernel, one epoch: %.2f GB/s moved | copy %.2f GB/s | fraction of copy %.2f"
          % (r["device_gbps"], r["copy_gbps"], r["arrays_device_fraction_of_copy"]))


def write_charts(result, out_dir):
    """PNG charts when matplotlib is installed; one clear line when it is not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("charts: matplotlib is not installed (pip install matplotlib, or the [bench] extra); "
              "no PNG written")
        return []
    written = []
    details = result["details"]
    if "e2e" in details:
        fig, axes = plt.subplots(1, len(details["e2e"]["results"]), figsize=(10, 3.5))
        axes = axes if hasattr(axes, "__len__") else [axes]
        for ax, (model, rows) in zip(axes, details["e2e"]["results"].items()):
            names = list(rows)
            ax.bar(names, [rows[n]["img_per_s"] for n in names], color="#4c72b0")
            ax.set_title(model)
            ax.set_ylabel("images/s")
        fig.suptitle("e2e on %s" % result["device"])
        fig.tight_layout()
        written.append(os.path.join(out_dir, "e2e.png"))
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)
    if "ops" in details:
        rows = details["ops"]
        labels = ["%s%s" % (r["dtype"], " CL" if r["channels_last"] else "") for r in rows]
        fig, ax = plt.subplots(figsize=(8, 3.5))
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], [r["ops_gbps"] for r in rows], width=0.4, label="fused op")
        ax.bar([i + 0.2 for i in x], [r.get("chain_gbps", 0) for r in rows], width=0.4, label="torch chain")
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels)
        ax.set_ylabel("GB/s moved")
        ax.legend()
        ax.set_title("fused op on %s" % result["device"])
        fig.tight_layout()
        written.append(os.path.join(out_dir, "ops.png"))
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)
    for path in written:
        print("chart: %s" % path)
    return written


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in sections if s not in SECTIONS and s not in PLANNED]
    if unknown:
        sys.exit("unknown section(s) %s; choose from %s" % (unknown, list(SECTIONS) + list(PLANNED)))
    torch.manual_seed(0)
    device = torch.device(args.device) if args.device else (
        torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu"))
    batch_sizes = args.batch_sizes or ([64, 256] if not args.quick else [64, 256])
    batches = 6 if args.quick else 16

    print("prefetch %s bench | torch %s | device %s" % (prefetch.__version__, torch.__version__, device_name(device)))
    t0 = time.perf_counter()
    metrics, details, skipped = {}, {}, {}
    for section in sections:
        if section in PLANNED:
            skipped[section] = "not implemented in prefetch %s yet" % prefetch.__version__
            print("  -- %s: skipped (%s)" % (section, skipped[section]))
            continue
        if section == "collate":
            rows = collate.run(batch_sizes, args.image_size, batches, args.threads, progress)
            details["collate"] = rows
            print_collate_table(rows)
            main_row = max(rows, key=lambda r: r["batch_size"])
            metrics.update({
                "collate_gbps": main_row["collate_gbps"],
                "copy_gbps": main_row["copy_gbps"],
                "collate_vs_default_collate": main_row["collate_vs_default_collate"],
                "collate_fraction_of_copy": main_row["collate_fraction_of_copy"],
            })

        if section == "ops":
            n = 64 if args.quick else max(batch_sizes)
            progress("ops: %d images on %s" % (n, device))
            rows = ops.measure(device, n=n, size=args.image_size, crop=args.image_size,
                               repeats=2 if args.quick else 5)
            details["ops"] = rows
            print_ops_table(rows, n, args.image_size)
            main_row = next(r for r in rows if r["dtype"] == "float32" and not r["channels_last"])
            metrics.update({k: main_row[k] for k in ("ops_gbps", "ops_fraction_of_copy", "ops_vs_torch_chain")})
            config_ops = {"images": n, "dtype": "float32", "layout": "contiguous"}
            details["ops_config"] = config_ops

        if section == "arrays":
            n = 10000 if args.quick else 50000
            row = arrays.measure(device, n=n, batches=8 if args.quick else n // 256,
                                 threads=args.threads, progress=progress,
                                 repeats=2 if args.quick else 5)
            details["arrays"] = row
            print_arrays_table(row)
            metrics.update({k: row[k] for k in ("arrays_vs_dataloader", "device_batches_per_s",
                                                "arrays_device_fraction_of_copy")})

        if section == "h2d":
            if device.type != "cuda":
                skipped["h2d"] = ("no CUDA device: host-to-device copies do not apply; the CPU "
                                  "pipeline's copy is measured by collate (pipeline_gbps) and e2e")
                print("  -- h2d: skipped (%s)" % skipped["h2d"])
                continue
            progress("h2d: %d-image batches through the ring, pin_memory().to(), raw pinned copies"
                     % max(batch_sizes))
            row = h2d.measure(device, max(batch_sizes) * args.image_size ** 2 * 3,
                              count=8 if args.quick else 20, threads=args.threads)
            details["h2d"] = row
            print("\nh2d (%.1f MiB batches): ring %.2f GB/s | pin_memory().to() %.2f GB/s | raw pinned %.2f GB/s"
                  " | ring/raw %.2f" % (row["batch_mib"], row["h2d_gbps"], row["pin_memory_gbps"],
                                        row["h2d_raw_gbps"], row["h2d_fraction_of_raw"]))
            metrics.update({k: row[k] for k in ("h2d_gbps", "h2d_raw_gbps", "h2d_fraction_of_raw")})
            n = 64 if args.quick else max(batch_sizes)
            progress("h2d: zero-copy (the op reading pinned memory) against copy, then op")
            zrows = h2d.measure_zero_copy(device, n=n, size=args.image_size, crop=args.image_size,
                                          repeats=2 if args.quick else 5)
            details["h2d_zero_copy"] = zrows
            for z in zrows:
                print("zero-copy fp16%s: %.3f ms | copy, then op %.3f ms | copy-then-op / zero-copy %.2f"
                      % (" channels_last" if z["channels_last"] else "", z["zero_copy_s"] * 1e3,
                         z["copy_then_op_s"] * 1e3, z["zero_copy_vs_copy_then_op"]))
            metrics["zero_copy_vs_copy_then_op"] = zrows[0]["zero_copy_vs_copy_then_op"]
        if section == "e2e":
            bs = 64 if args.quick else max(batch_sizes)
            size = 112 if args.quick else args.image_size
            steps = args.steps or (4 if args.quick else 10)
            result = e2e.run(device, batch_size=bs, image_size=size, workers=args.workers,
                             steps=steps, threads=args.threads, progress=progress)
            details["e2e"] = result
            skipped.update({"e2e:" + k: v for k, v in result["skipped"].items()})
            for k, v in result["skipped"].items():
                print("  -- e2e %s: skipped (%s)" % (k, v))
            print_e2e_table(result)
            metrics.update(e2e.summarize(result))

    os.makedirs(args.out, exist_ok=True)
    result = {
        "device": device_name(device),
        "torch": torch.__version__,
        "prefetch": prefetch.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "config": {"sections": sections, "quick": args.quick, "batch_sizes": batch_sizes,
                   "image_size": args.image_size, "workers": args.workers,
                   "metrics_batch_size": max(batch_sizes)},
        "metrics": metrics,
        "details": details,
        "skipped": skipped,
    }
    path = os.path.join(args.out, "results.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    write_charts(result, args.out)
    print("\nwrote %s in %.1f s" % (path, time.perf_counter() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
