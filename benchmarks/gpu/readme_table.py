"""results.json of `python -m prefetch.bench` -> the tables of docs/benchmarks.md, in markdown.

    python benchmarks/gpu/readme_table.py gpu-out/bench/results.json [-o readme_table.md]

The tables follow README.md's "The library's own benchmarks" (host -> device, the fused op, the
training loop, ArrayLoader, collation, DataLoader workers), then every metric of results.json
and the verdict, with the device, versions and date the figures must be quoted with. A section
that did not run says why (results.json's ``skipped``, or ``failed`` from bench_sections.py);
a table that cannot be read out of its details says so instead of stopping the others.
"""
import argparse
import json
import sys


def _f(value, fmt="%.2f"):
    return "—" if value is None else fmt % value


def _table(header, rows, align=None):
    align = align or ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def _h2d(r):
    row = r["details"]["h2d"]
    lines = ["Host → device, %.1f MiB batches (GB/s, median of %d):" % (row["batch_mib"], row["repeats"]), ""]
    lines += _table(["ring (Prefetcher)", "`pin_memory().to()`", "raw pinned copies, one stream",
                     "ring / raw", "ring / `pin_memory().to()`"],
                    [[_f(row["h2d_gbps"], "%.1f"), _f(row["pin_memory_gbps"], "%.1f"),
                      _f(row["h2d_raw_gbps"], "%.1f"), _f(row["h2d_fraction_of_raw"]),
                      _f(row["h2d_vs_pin_memory"])]], ["---:"] * 5)
    zero = r["details"].get("h2d_zero_copy") or []
    if zero:
        lines += ["", "Zero-copy (the fused op reading pinned memory) against copy, then op:", ""]
        lines += _table(["output", "zero-copy ms", "copy, then op ms", "copy-then-op / zero-copy"],
                        [["%s%s" % (z["dtype"], " channels_last" if z["channels_last"] else ""),
                          _f(1e3 * z["zero_copy_s"], "%.3f"), _f(1e3 * z["copy_then_op_s"], "%.3f"),
                          _f(z["zero_copy_vs_copy_then_op"])] for z in zero])
    return lines


def _ops(r):
    rows = r["details"]["ops"]
    cfg = r["details"].get("ops_config", {})
    lines = ["Fused op%s (GB/s = bytes read + written):" % (
        ", %s images" % cfg["images"] if "images" in cfg else ""), ""]
    lines += _table(["output", "fused GB/s", "torch chain GB/s", "fused / chain", "fused / copy"],
                    [["%s%s" % (x["dtype"], " channels_last" if x["channels_last"] else ""),
                      _f(x["ops_gbps"], "%.1f"), _f(x.get("chain_gbps"), "%.2f"),
                      _f(x.get("ops_vs_torch_chain"), "%.1f"), _f(x.get("ops_fraction_of_copy"))]
                     for x in rows])
    return lines


def _e2e(r):
    e = r["details"]["e2e"]
    names = ["baseline", "timm", "prefetch", "ceiling"]
    label = {"ceiling": "cached"}
    lines = ["Training loop (N = %s DataLoader workers and prefetch threads; images/s; cached = "
             "the same loop on batches already on the device):" % e["config"].get("workers", "?"),
             ""]
    rows = []
    for model, pipes in e["results"].items():
        shape = e["config"]["shapes"][model]
        base = pipes.get("baseline", {}).get("img_per_s")
        pf = pipes.get("prefetch", {})
        timm = pipes.get("timm", {}).get("img_per_s")
        rows.append([model.replace("_", " "), "%d × %d²" % (shape["batch_size"], shape["image_size"])]
                    + [_f(pipes[n]["img_per_s"], "%.0f") if n in pipes else "—" for n in names]
                    + [_f(pf["img_per_s"] / base if pf and base else None),
                       _f(pf["img_per_s"] / timm if pf and timm else None),
                       _f(100 * pf["wait_fraction"], "%.1f%%") if pf else "—"])
    lines += _table(["model", "batch × size"] + [label.get(n, n) for n in names]
                    + ["prefetch / baseline", "prefetch / timm", "waiting for data (prefetch)"],
                    rows, ["---", "---"] + ["---:"] * 7)
    if e.get("skipped"):
        lines += [""] + ["%s skipped: %s" % (k, v) for k, v in e["skipped"].items()]
    return lines


def _arrays(r):
    a = r["details"]["arrays"]
    lines = ["ArrayLoader, %d uint8 images %d×%d×3, batch %d:" % (
        a["num_images"], a["image_size"], a["image_size"], a["batch_size"]), ""]
    rows = [["ArrayLoader, `resident=\"host\"`", _f(a["host_img_per_s"], "%.0f")]]
    for k, v in a.items():
        if k.startswith("dataloader_") and k.endswith("_img_per_s"):
            rows.append(["DataLoader, %s workers" % k.split("_")[1][:-1], _f(v, "%.0f")])
    if "device_img_per_s" in a:
        rows.append(["ArrayLoader, `resident=\"device\"` + FusedAugment", _f(a["device_img_per_s"], "%.0f")])
    lines += _table(["loader", "images/s"], rows)
    lines += ["", "host / best DataLoader %s; fused gather kernel / device copy %s" % (
        _f(a.get("arrays_vs_dataloader"), "%.1f"), _f(a.get("arrays_device_fraction_of_copy")))]
    return lines


def _collate(r):
    rows = r["details"]["collate"]
    lines = ["Collation (engine threads into the pinned ring):", ""]
    lines += _table(["batch", "MiB", "engine GB/s", "plain copy GB/s", "`default_collate` GB/s",
                     "engine / plain copy", "engine / `default_collate`", "whole epochs GB/s"],
                    [[x["batch_size"], _f(x["batch_mib"], "%.1f"), _f(x["collate_gbps"], "%.1f"),
                      _f(x["copy_gbps"], "%.1f"), _f(x["default_collate_gbps"], "%.1f"),
                      _f(x.get("collate_fraction_of_copy")), _f(x.get("collate_vs_default_collate"), "%.1f"),
                      _f(x.get("pipeline_gbps"), "%.1f")] for x in rows],
                    ["---:"] * 8)
    return lines


def _workers(r):
    m = r["metrics"]
    sizes = sorted({int(k.rsplit("_b", 1)[1]) for k in m if k.startswith("prefetch_vs_usual_b")})
    if not sizes:
        raise KeyError("no prefetch_vs_usual_bN metric")
    lines = ["DataLoader workers (images/s; ratios to the usual pipeline):", ""]
    rows = []
    for b in sizes:
        rows.append([b, _f(m.get("workers_usual_img_per_s_b%d" % b), "%.0f"),
                     _f(m.get("workers_prefetch_img_per_s_b%d" % b), "%.0f"),
                     _f(m.get("prefetch_vs_usual_b%d" % b)),
                     _f(m.get("prefetch_default_collate_vs_usual_b%d" % b)),
                     _f(m.get("handoff_stored_vs_engine_collate_b%d" % b))])
    lines += _table(["batch", "usual", "Prefetcher over `collate.samples`", "vs usual",
                     "over `default_collate`, vs usual", "hand-off / engine collation"], rows,
                    ["---:"] * 6)
    jpeg = sorted(k for k in m if k.startswith("jpeg_") and k.endswith("_vs_usual"))
    if jpeg:
        lines += ["", "JPEG pipelines, vs the usual one: " + ", ".join(
            "%s %s" % (k[len("jpeg_"):-len("_vs_usual")], _f(m[k])) for k in jpeg)]
    return lines


SECTIONS = [("h2d", "h2d", _h2d), ("ops", "ops", _ops), ("e2e", "e2e", _e2e),
            ("arrays", "arrays", _arrays), ("collate", "collate", _collate),
            ("workers", "workers", _workers)]


def render(result):
    """The markdown for one results.json (a dict)."""
    config = result.get("config", {})
    lines = ["<!-- python benchmarks/gpu/readme_table.py: from results.json of %s -->" % result.get("date", "?"),
             "",
             "%s, torch %s, prefetch %s, Python %s, %s (`python -m prefetch.bench`, sections %s, "
             "batch sizes %s, image size %s%s):" % (
                 result.get("device", "?"), result.get("torch", "?"), result.get("prefetch", "?"),
                 result.get("python", "?"), (result.get("date") or "?")[:10],
                 ",".join(config.get("sections", [])) or "?", config.get("batch_sizes", "?"),
                 config.get("image_size", "?"), ", --quick" if config.get("quick") else "")]
    skipped, failed = result.get("skipped", {}), result.get("failed", {})
    details = result.get("details", {})
    ran = set(config.get("sections", [])) | set(details)
    for name, key, fn in SECTIONS:
        lines.append("")
        if name in failed:
            lines.append("**%s**: failed: %s" % (name, failed[name]))
            continue
        if name in skipped:
            lines.append("**%s**: skipped: %s" % (name, skipped[name]))
            continue
        if name not in ran and key not in details:
            lines.append("**%s**: not run" % name)
            continue
        try:
            lines += fn(result)
        except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError) as exc:
            lines.append("**%s**: its table could not be read out of results.json (%s: %s)"
                         % (name, type(exc).__name__, exc))
    metrics = result.get("metrics", {})
    lines += ["", "Every metric (results.json `metrics`):", ""]
    lines += _table(["metric", "value"],
                    [["`%s`" % k, ("%.4g" % v) if isinstance(v, float) else v]
                     for k, v in sorted(metrics.items())])
    if result.get("verdict"):
        lines += ["", "Verdict: %s" % result["verdict"]]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", help="a results.json of python -m prefetch.bench")
    p.add_argument("-o", "--out", default=None, help="write the markdown here (default: stdout)")
    args = p.parse_args(argv)
    with open(args.results) as f:
        text = render(json.load(f))
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
