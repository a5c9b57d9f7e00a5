"""What the CLI prints: the console and its width, tables fitted to it, byte sizes, mask
histograms, plan tables.

Shared by the commands (``zopt.cli.recompress``, ``analyze``, ``info``, ``lossy``, ``verify``).

Width: ``COLUMNS`` when set, as rich reads it (piped output too); else the terminal's; else, with
no terminal at all (logs, CI), ``DEFAULT_WIDTH``. Every command that prints a table takes
``--wide`` (``wide_option``): every column at its full width, whatever the width. Without it
``fitted`` fits a table to the width: headers and prose wrap at spaces (never cut to "chun…"),
numbers with their units and names never wrap ("889.0 KiB" stays on one line), columns that say
nothing ("—" in every row) are left out, and when the table still does not fit, its least needed
columns are left out, the caption saying which.
"""

from __future__ import annotations

import collections
import os
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

if TYPE_CHECKING:
    from zopt.planning.plan import ArrayPlan, Plan

#: a click command function (or command) that an option decorates
_Command = TypeVar("_Command", bound=Callable[..., Any])

__all__ = ["DEFAULT_WIDTH", "chain_text", "console", "fitted", "human", "mask_text", "plan_table", "set_width",
           "short_path", "wide_option", "wrap_words"]

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


def _content_widths(table: Table, column: Column, atoms: bool) -> tuple[int, int]:
    """(narrowest, natural) width of a column's header and cells, without padding: the header may
    wrap at spaces (its longest word); a cell of ``atoms`` never wraps (its longest line), one of
    prose wraps at spaces (its longest word)."""
    options = console.options.update_width(WIDE)
    low = high = 1
    for i, cell in enumerate([column.header, *column._cells]):
        m = Measurement.get(console, options, cell)
        low, high = max(low, m.maximum if atoms and i else m.minimum), max(high, m.maximum)
    return low, high


def _empty(column: Column) -> bool:
    """Whether every cell of ``column`` says nothing ("—" or blank)."""
    return bool(column._cells) and all(str(cell).strip() in ("", "—") for cell in column._cells)


#: a space that must not break a line: between a number and its unit, after a comparison sign
_KEEP = re.compile(r"(?<=\d) (?=(?:B|KiB|MiB|GiB|TiB|s|MB/s|%|×)(?:\W|$))|(?<=[≥≤<>=]) (?=\d)")


def wrap_words(text: str, width: int) -> str:
    """``text`` wrapped to ``width`` at spaces, never between a number and its unit ("889.0 KiB",
    "0.13 s") nor inside a word; a word longer than ``width`` stands on a line of its own."""
    lines = textwrap.wrap(_KEEP.sub("\u00a0", text), max(width, 1), break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines).replace("\u00a0", " ")


def short_path(path: str, room: int) -> str:
    """``path`` as given when it has at most ``room`` characters, else its last part (a title that
    names a long path still fits; the user typed the whole one)."""
    text = str(path)
    return text if len(text) <= room else text.rstrip("/").rsplit("/", 1)[-1] or text


def fitted(table: Table, drop: Sequence[str] = (), wrap: Sequence[str] = (),
           notes: Mapping[str, str] | None = None) -> Table:
    """``table`` fitted to the console's width. Columns named in ``wrap`` hold prose, which wraps
    at spaces; every other column holds atoms (numbers with their units, names, short phrases)
    that never wrap; headers wrap at spaces. A column whose every cell is "—" or blank is left
    out. While the table does not fit, the columns named in ``drop`` (headers, least needed first)
    are left out, the caption naming them; the rest of the width is shared in proportion to what
    each column needs beyond its narrowest. ``notes``: what a column means, by header, added to
    the caption while the column is shown. Title and caption wrap at spaces, never between a
    number and its unit. Should even the narrowest columns not fit, cells fold onto the next
    line. With ``--wide``: every column at its natural width, empty ones too."""
    def caption(extra: Sequence[str]) -> None:
        shown = {str(c.header) for c in table.columns}
        parts = [str(table.caption)] if table.caption else []
        parts += [text for name, text in (notes or {}).items() if name in shown] + list(extra)
        table.caption = "; ".join(parts) or None

    if _wide:
        caption(())
        return table
    for column in [c for c in table.columns[1:] if _empty(c)]:
        table.columns.remove(column)
    width = console.width
    pad = sum(table.padding[1::2]) if table.padding else 0  # left + right padding of a cell

    def room() -> int:  # the width left for the cells' content
        n = len(table.columns)
        return width - (n + 1 if table.box else 0) - n * pad

    def widths() -> list[tuple[int, int]]:
        return [_content_widths(table, c, str(c.header) not in wrap) for c in table.columns]

    left_out = []
    for name in drop:
        if sum(low for low, _ in widths()) <= room():
            break
        found = next((c for c in table.columns if c.header == name), None)
        if found is not None:
            table.columns.remove(found)
            left_out.append(name)
    caption([f"left out to fit {width} columns: {', '.join(left_out)} (--wide shows every column)"] if left_out else [])
    sizes = widths()
    if sum(high for _, high in sizes) > room():
        low_total = sum(low for low, _ in sizes)
        if low_total > room():  # even the narrowest columns do not fit: fold them
            sizes = [(max(1, low * room() // low_total), high) for low, high in sizes]
            for column in table.columns:
                column.overflow = "fold"
            low_total = sum(low for low, _ in sizes)
        extra, flex = max(0, room() - low_total), [high - low for low, high in sizes]
        share = [low + (extra * f // sum(flex) if sum(flex) else 0) for (low, _), f in zip(sizes, flex, strict=True)]
        for column, w in zip(table.columns, share, strict=True):
            column.width = w
    for column in table.columns:
        if str(column.header) in wrap and column.width and column.overflow != "fold":  # "≥ 3.1" stays together
            column._cells = [wrap_words(c, column.width) if isinstance(c, str) else c for c in column._cells]
        if str(column.header) not in wrap and column.overflow != "fold":
            column.no_wrap = True  # the cells stay whole; the header still wraps at spaces
            header = column.header = Text.from_markup(str(column.header), justify=column.justify)
            header.no_wrap = False
    # title and caption wrapped here at the table's width (rich would break "0.13 s" after the number)
    at = Measurement.get(console, console.options, table).maximum
    for attr in ("title", "caption"):
        text = getattr(table, attr)
        if isinstance(text, str) and text:
            wrapped = wrap_words(text, at)
            setattr(table, attr, wrapped)
            if attr == "caption" and "\n" in wrapped:
                table.caption_justify = "left"
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
    notes = {"masks": "masks: bitmask (bit 0 = first wrapped codec) : chunks",
             "chain": "chain: chosen from the codec menu (trial bytes relative to the reference candidate)"}
    return fitted(table, ("fingerprint", "chunk grid", "codecs", "chunk shape"), notes=notes)
