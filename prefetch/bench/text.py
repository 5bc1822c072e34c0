"""Plain-text tables for the bench's printed output: columns as wide as their widest cell, and a
figure written as its median with the range of its repetitions."""


def columns(head, rows, indent="  "):
    """Lines of `head` and `rows` (lists of strings), each column right-aligned to its widest
    cell (the first column left-aligned)."""
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]

    def line(cells):
        return indent + " | ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return [line(head)] + [line(r) for r in rows]


def spread(median, low, high, fmt="%.2f"):
    """'median (low–high)'."""
    return (fmt + " (" + fmt + "–" + fmt + ")") % (median, low, high)
