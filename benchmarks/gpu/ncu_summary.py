"""One line per profiled launch from Nsight Compute's text report (gpu_check's `profile` stage):
the variant's name (profile_ops.py's --launches order), its duration, memory and DRAM throughput,
registers and achieved occupancy.

    python benchmarks/gpu/ncu_summary.py ncu.txt variants.json > summary.txt

The stage used to keep the first 60 lines of a grep over the report: those held 10 of the 17
launches (2026-11-30), and none of the kernels' names (the demangled headers begin with "void").
"""
import argparse
import json
import re
import sys

# A launch's header: "  void ns::kernel<...>(Args...) (grid)x(block), Context 1, Stream 7, ..."
HEADER = re.compile(r"^  \S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)")
METRIC = re.compile(r"^    (?P<name>[A-Za-z][A-Za-z /]*?)\s{2,}(?P<unit>\S+(?:/\S+)?)?\s+(?P<value>[\d,.]+)$")
# ncu's units for a duration and a rate, to microseconds and GB/s.
TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
         "s": 1e6, "second": 1e6}
TO_GBPS = {unit + per: scale for unit, scale in (("byte", 1e-9), ("Kbyte", 1e-6), ("Mbyte", 1e-3),
                                                 ("Gbyte", 1.0), ("Tbyte", 1e3))
           for per in ("/s", "/second")}


def launches(lines):
    """[(header, {metric: [(unit, value), ...]})] in the report's order; a metric that appears in
    several sections (Memory Throughput: % in Speed Of Light, bytes/s in Memory Workload Analysis)
    keeps each occurrence."""
    out = []
    for line in lines:
        if HEADER.match(line):
            out.append((line.strip(), {}))
            continue
        match = METRIC.match(line.rstrip())
        if out and match:
            value = float(match["value"].replace(",", ""))
            out[-1][1].setdefault(match["name"].strip(), []).append((match["unit"] or "", value))
    return out


def kernel_name(header):
    """The kernel's short name: its namespaces, return type and parameter list dropped, its template
    arguments kept ('normalize_flip_kernel<ToFloat32, 0>': they tell the variants apart). Read from
    ncu's demangled header with --kernel-name-base demangled, whose namespaces ncu already
    shortens; a '::' inside a template argument would cut the name there."""
    name = header.split("(")[0].strip()
    if name.startswith("void "):
        name = name[len("void "):]
    return name.split("::")[-1].strip()


def row(name, header, metrics):
    """{variant, kernel, duration_us, memory_pct, memory_gbps, dram_pct, registers, occupancy_pct}:
    None where the report lacks the metric or gives it in a unit not known here."""
    def first(metric, unit_table=None, percent=False):
        for unit, value in metrics.get(metric, []):
            if percent and unit == "%":
                return value
            if unit_table is not None and unit in unit_table:
                return value * unit_table[unit]
            if unit_table is None and not percent:
                return value
        return None

    return {"variant": name, "kernel": kernel_name(header),
            "duration_us": first("Duration", TO_US),
            "memory_pct": first("Memory Throughput", percent=True),
            "memory_gbps": first("Memory Throughput", TO_GBPS),
            "dram_pct": first("DRAM Throughput", percent=True),
            "registers": first("Registers Per Thread"),
            "occupancy_pct": first("Achieved Occupancy", percent=True)}


def summarize(report_lines, names):
    """The rows, one per launch; a launch beyond `names` is named by its index (ncu selected more
    than profile_ops.py listed: the report is then not in the variants' order, and says so)."""
    found = launches(report_lines)
    rows = [row(names[i] if i < len(names) else "launch %d (unlisted)" % i, header, metrics)
            for i, (header, metrics) in enumerate(found)]
    return rows


def format_rows(rows, expected):
    def cell(value, fmt):
        return "-" if value is None else fmt % value

    lines = ["%-40s %10s %7s %9s %7s %5s %6s  %s" % ("variant", "us", "mem %", "mem GB/s", "dram %",
                                                   "regs", "occ %", "kernel")]
    for r in rows:
        lines.append("%-40s %10s %7s %9s %7s %5s %6s  %s" % (
            r["variant"], cell(r["duration_us"], "%.2f"), cell(r["memory_pct"], "%.1f"),
            cell(r["memory_gbps"], "%.0f"), cell(r["dram_pct"], "%.1f"),
            cell(r["registers"], "%.0f"), cell(r["occupancy_pct"], "%.1f"), r["kernel"]))
    if len(rows) != expected:
        lines.append("note: %d launches in the report, %d variants listed: the names may not match"
                     % (len(rows), expected))
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", help="ncu's text report (ncu.txt)")
    parser.add_argument("variants", help="profile_ops.py --launches' JSON list of names")
    parser.add_argument("--json", action="store_true", help="the rows as JSON instead of a table")
    args = parser.parse_args(argv)
    with open(args.report) as f:
        report = f.read().splitlines()
    with open(args.variants) as f:
        names = json.load(f)
    rows = summarize(report, names)
    sys.stdout.write(json.dumps(rows, indent=1) + "\n" if args.json else format_rows(rows, len(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
