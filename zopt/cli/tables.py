"""What the CLI prints: the console and its width, tables fitted to it, byte sizes, mask
histograms, plan tables.

Shared by the commands (``zopt.cli.recompress``, ``analyze``, ``info``, ``lossy``, ``verify``).

Width: ``COLUMNS`` when set, as rich reads it (piped output too); else the terminal's; else, with
no terminal at all (logs, CI), ``DEFAULT_WIDTH``. Every command that prints a table takes
``--wide`` (``wide_option``): every column at its full width, whatever the width. Without it
``fitted`` fits a table to the width: headers and cells wrap at spaces (never cut to "chun…"),
and when the table still does not fit, its least needed columns are left out, the caption saying
which.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.measure import Measurement
from rich.table import Column, Table

if TYPE_CHECKING:
    from zopt.planning.plan import ArrayPlan, Plan

#: a click command function (or command) that an option decorates
_Command = TypeVar("_Command", bound=Callable[..., Any])

__all__ = ["DEFAULT_WIDTH", "chain_text", "console", "fitted", "human", "mask_text", "plan_table", "set_width",
           "wide_option"]

#: the width of output with no terminal and no COLUMNS (logs, CI, pipes)
DEFAULT_WIDTH = 100
#: the width ``--wide`` gives (every table prints whole; rich never pads a table to it)
WIDE = 10_000

console = Console(width=DEFAULT_WIDTH)
_wide = False


def _terminal() -> bool:
    """Whether stdin, stdout or stderr is a terminal (where rich reads its width)."""
    for fd in (0, 1, 2):
        try:
            os.get_terminal_size(fd)
        except (AttributeError, ValueError, OSError):
            continue
        return True
    return False


def set_width(wide: bool = False) -> None:
    """Set the console's width for this command (see the module docstring)."""
    global _wide
    _wide = wide
    columns = os.environ.get("COLUMNS", "")
    if wide:
        console.width = WIDE
    elif columns.isdigit() and int(columns) > 0:
        console.width = int(columns)
    elif _terminal():
        console.width = None  # type: ignore[assignment]  # rich: the terminal's width, read at each print
    else:
        console.width = DEFAULT_WIDTH


def wide_option(command: _Command) -> _Command:
    """The ``--wide`` option: set on a command that prints a table; sets the console's width."""
    return click.option("--wide", is_flag=True, expose_value=False, is_eager=True,
                        callback=lambda ctx, param, value: set_width(bool(value)),
                        help="Print every table column at full width (default: fit the terminal, COLUMNS, or "
                             f"{DEFAULT_WIDTH} columns, leaving out the least needed columns).")(command)


def _content_widths(table: Table, column: Column) -> tuple[int, int]:
    """(narrowest, natural) width of a column's header and cells, without padding: the narrowest
    is its longest word, the natural its longest line."""
    options = console.options.update_width(WIDE)
    low = high = 1
    for cell in [column.header, *column._cells]:
        m = Measurement.get(console, options, cell)
        low, high = max(low, m.minimum), max(high, m.maximum)
    return low, high


def fitted(table: Table, drop: Sequence[str] = ()) -> Table:
    """``table`` fitted to the console's width: each column gets at least its longest word, the
    rest of the width shared in proportion to what each needs beyond that, so headers and cells
    wrap at spaces and no word is cut to "…" (rich alone would cut them). While even the longest
    words do not fit, the columns named in ``drop`` (headers, least needed first) are left out,
    the caption naming them; should they still not fit, long words fold onto the next line.
    With ``--wide``: the table unchanged."""
    if _wide:
        return table
    width = console.width
    pad = sum(table.padding[1::2]) if table.padding else 0  # left + right padding of a cell

    def room() -> int:  # the width left for the cells' content
        n = len(table.columns)
        return width - (n + 1 if table.box else 0) - n * pad

    left_out = []
    for name in drop:
        if sum(_content_widths(table, c)[0] for c in table.columns) <= room():
            break
        column = next((c for c in table.columns if c.header == name), None)
        if column is not None:
            table.columns.remove(column)
            left_out.append(name)
    if left_out:
        note = f"left out to fit {width} columns: {', '.join(left_out)} (--wide shows every column)"
        table.caption = f"{table.caption}; {note}" if table.caption else note
    widths = [_content_widths(table, c) for c in table.columns]
    if sum(high for _, high in widths) <= room():
        return table  # fits at its natural width
    low_total = sum(low for low, _ in widths)
    if low_total > room():  # even the longest words do not fit: fold them
        widths = [(max(1, low * room() // low_total), high) for low, high in widths]
        for column in table.columns:
            column.overflow = "fold"
        low_total = sum(low for low, _ in widths)
    extra, flex = max(0, room() - low_total), [high - low for low, high in widths]
    share = [low + (extra * f // sum(flex) if sum(flex) else 0) for (low, _), f in zip(widths, flex, strict=True)]
    for column, w in zip(table.columns, share, strict=True):
        column.width = w
    return table


def human(n: float | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def mask_text(masks: Mapping[int, int], n_bits: int = 2) -> str:
    """A mask histogram ``{mask: chunks}`` as ``"01:12 11:3"`` (masks in binary, at least ``n_bits`` wide)."""
    if not masks:
        return "—"
    width = max(n_bits, max(int(m).bit_length() for m in masks))
    return " ".join(f"{int(m):0{width}b}:{c}" for m, c in sorted(masks.items()))


def chain_text(ap: ArrayPlan) -> str:
    """A plan array's chosen chain: the candidate and its trial size against the menu's reference."""
    choice = ap.choice or {}
    trials = choice.get("trials") or {}
    name = str(choice.get("candidate", "?"))
    if name in trials and trials:
        ref = next(iter(trials.values()))[0]
        return f"{name} ({trials[name][0] / max(ref, 1):.2f})"
    return name


def plan_table(p: Plan, path: str | os.PathLike[str]) -> Table:
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
    return fitted(table, ("fingerprint", "chunk grid", "codecs", "chunk shape"))
