"""PNG charts of a results.json when matplotlib is installed (``python -m prefetch.bench``)."""
import os


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
            ax.bar([{"ceiling": "cached"}.get(n, n) for n in names],  # not a bound: e2e.py
                   [rows[n]["img_per_s"] for n in names], color="#4c72b0")
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
