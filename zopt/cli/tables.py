"""What the CLI prints: the console (wide when piped), byte sizes, mask histograms, plan tables.

Shared by the commands (``zopt.cli.recompress``, ``analyze``, ``info``, ``lossy``, ``verify``).
"""

from __future__ import annotations

import collections
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["chain_text", "console", "human", "mask_text", "plan_table"]

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


def chain_text(ap: Any) -> str:
    """A plan array's chosen chain: the candidate and its trial size against the menu's reference."""
    choice = ap.choice or {}
    trials = choice.get("trials") or {}
    name = str(choice.get("candidate", "?"))
    if name in trials and trials:
        ref = next(iter(trials.values()))[0]
        return f"{name} ({trials[name][0] / max(ref, 1):.2f})"
    return name


def plan_table(p: Any, path: Any) -> Table:
    """The summary table of a saved plan ``p`` (``zopt.planning.plan.Plan``) at ``path``."""
    table = Table(title=f"plan {path}: policy {p.policy} {p.params or ''}, zopt {p.zopt_version}, {p.created}")
    menu = any(ap.chain is not None for ap in p.arrays.values())
    for col in ("array", "chunk grid", "chunk shape", *(("chain",) if menu else ()), "codecs", "masks", "est. ratio",
                "fingerprint"):
        table.add_column(col, justify="right" if col == "est. ratio" else "left")
    for name, ap in p.arrays.items():
        hist = collections.Counter(int(m) for m in ap.masks.ravel())
        est = ap.stats.get("raw_bytes", 0) / max(ap.stats.get("estimated_bytes", 0), 1)
        masked = ap.chain is None or any(c["name"] == "conditional" for c in ap.chain)
        table.add_row(name, "×".join(map(str, ap.masks.shape)), "×".join(map(str, ap.chunk_shape)),
                      *((chain_text(ap),) if menu else ()), ", ".join(c["name"] for c in ap.codecs) if masked else "—",
                      mask_text(hist) if masked else "— (no conditional)", f"{est:.2f}", ap.fingerprint[:16])
    table.caption = "masks: bitmask (bit 0 = first wrapped codec) : chunks" + (
        "; chain: chosen from the codec menu (trial bytes relative to the reference candidate)" if menu else "")
    return table
