"""What the CLI prints: the console (wide when piped), byte sizes, mask histograms, plan tables.

Shared by ``zopt.cli.commands`` and the commands that live beside it (``zopt.cli.lossy``).
"""

from __future__ import annotations

import collections
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["console", "human", "mask_text", "plan_table"]

# piped output (logs, CI) gets a wide table instead of rich's 80-column fallback
console = Console(width=None if sys.stdout.isatty() else 160)


def human(n: float | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def mask_text(masks: Any, n_bits: int = 2) -> str:
    if not masks:
        return "—"
    width = max(n_bits, max(int(m).bit_length() for m in masks))
    return " ".join(f"{int(m):0{width}b}:{c}" for m, c in sorted(masks.items()))


def plan_table(p: Any, path: Any) -> Table:
    """The summary table of a saved plan ``p`` (``zopt.planning.plan.Plan``) at ``path``."""
    table = Table(title=f"plan {path}: policy {p.policy} {p.params or ''}, zopt {p.zopt_version}, {p.created}")
    for col in ("array", "chunk grid", "chunk shape", "codecs", "masks", "est. ratio", "fingerprint"):
        table.add_column(col, justify="right" if col == "est. ratio" else "left")
    for name, ap in p.arrays.items():
        hist = collections.Counter(int(m) for m in ap.masks.ravel())
        est = ap.stats.get("raw_bytes", 0) / max(ap.stats.get("estimated_bytes", 0), 1)
        table.add_row(name, "×".join(map(str, ap.masks.shape)), "×".join(map(str, ap.chunk_shape)),
                      ", ".join(c["name"] for c in ap.codecs), mask_text(hist), f"{est:.2f}", ap.fingerprint[:16])
    table.caption = "masks: bitmask (bit 0 = first wrapped codec) : chunks"
    return table
