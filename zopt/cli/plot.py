"""Pictures of chunk grids (matplotlib): the ``conditional`` mask and the compression ratio of
every chunk, for a plan (``zopt plan show --png``) or a store (``zopt info --png``).

One row of panels per array, data variables first, then coordinates, each group by name. Arrays
of one chunk have nothing to draw: a caption under the figure lists them with their mask and
ratio. Only the grid dimensions with more than one chunk are drawn (a 20 × 1 × 1 grid is a strip
of 20 cells). A 2-D grid is drawn as two heatmaps (row 0 at the bottom, integer chunk indices on
the axes); an N-D grid as up to ``MAX_SLICES`` 2-D slices along its leading dimensions; a 1-D
grid as a strip of masks and a bar chart of ratios. Axes are labelled with the dimension names
(``dim 0`` … only for plans saved without them, by zopt 0.1). Ratios are on a log scale (one
700× chunk must not flatten the rest). A chunk equal to the fill value is not written: light
grey in the mask panel, blank in the ratio panel. An array without a ``conditional`` codec has
no masks: its left panel says which one chain every chunk gets and which chunks were written.
Plans made with a codec menu name each array's chosen chain in its panel title. Plans that hold
per-chunk keepbits (``zopt.lossy`` keepbits plans) get a third column: the mantissa bits each
chunk keeps.

matplotlib is an optional dependency (``pip install ".[plot]"`` in a zopt clone, or ``pip install matplotlib``).
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from zopt.errors import OptionError

if TYPE_CHECKING:
    import zarr
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    from zopt.planning.plan import Plan

__all__ = ["GridPanel", "chain_words", "plot_grids", "plot_plan", "plot_store"]

#: 2-D slices drawn per array of an N-D grid (evenly spaced along the leading dimensions)
MAX_SLICES = 4
NOT_WRITTEN = "lightgrey"
WRITTEN = "tab:blue"
#: what a light grey cell means, in every legend
NOT_WRITTEN_TEXT = "grey: chunk equal to the fill value, not written"


@dataclass
class GridPanel:
    """One array's chunk grid to draw.

    name : array name (with shape, dtype and units, if known, for the title; panels sort by it).
    masks : int grid of masks, -1 where not written; None when the array has no conditional codec.
    ratios : float grid of raw / stored bytes, NaN where not written.
    codecs : names of the conditional codec's wrapped codecs (bit 0 first).
    dims : dimension names of the array (axis labels), or None.
    chunk_shape : elements per chunk along each dimension.
    ratio_label : what the ratio is ("estimated ratio" for a plan, "ratio" for a store).
    keepbits : int grid of mantissa bits kept per chunk (lossy keepbits plans), or None.
    chain : the chain chosen from the codec menu (plans made with --menu), or the array's one
        chain in words when it has no conditional codec ("pcodec 8"), or None.
    coordinate : a coordinate (drawn after the data variables).
    """

    name: str
    masks: np.ndarray | None
    ratios: np.ndarray
    codecs: Sequence[str]
    dims: Sequence[str] | None
    chunk_shape: Sequence[int]
    ratio_label: str = "ratio"
    keepbits: np.ndarray | None = None
    chain: str | None = None
    coordinate: bool = False


def chain_words(codecs: Sequence[dict[str, Any]]) -> str:
    """A codec chain in a few words: ``[bytes, numcodecs.pcodec level 8]`` → ``"pcodec 8"``
    (the serializer ``bytes`` and codec prefixes left out, levels kept; ``sharding_indexed`` by
    its inner chain)."""
    words = []
    for c in codecs:
        name = str(c.get("name", "?"))
        config = c.get("configuration") or {}
        if name == "sharding_indexed":
            words.append(chain_words(config.get("codecs", [])))
            continue
        if name in ("bytes", "crc32c"):
            continue
        name = name.removeprefix("numcodecs.").removeprefix("zopt.")
        level = config.get("level", config.get("clevel"))
        raw = config.get("shuffle")  # blosc: a number (v2) or a name (v3)
        shuffle = {1: "shuffle", 2: "bitshuffle"}.get(raw, raw) if isinstance(raw, int) else raw
        parts = [name, config.get("cname"), level, shuffle if shuffle in ("shuffle", "bitshuffle") else None]
        words.append(" ".join(str(x) for x in parts if x is not None))
    return ", ".join(w for w in words if w) or "bytes (raw)"


def _kept_axes(shape: Sequence[int]) -> list[int]:
    """The grid axes with more than one chunk (the last axis when none has): only those are drawn,
    so a 20 × 1 × 1 grid is a strip of 20 cells, not panels of one cell each."""
    return [i for i, n in enumerate(shape) if n > 1] or [len(shape) - 1]


def _dim(panel: GridPanel, axis: int) -> str:
    return str(panel.dims[axis]) if panel.dims else f"dim {axis}"


def _slices(grid: np.ndarray, names: Sequence[str]) -> list[tuple[str, tuple[int, ...], np.ndarray]]:
    """``(label, kept axes, 1-D or 2-D grid)`` slices of a grid whose axes are ``names``."""
    if grid.ndim <= 2:
        return [("", tuple(range(grid.ndim)), grid)]
    lead = grid.shape[:-2]
    flat = int(np.prod(lead))
    picks = sorted({int(round(x)) for x in np.linspace(0, flat - 1, min(MAX_SLICES, flat))})
    out: list[tuple[str, tuple[int, ...], np.ndarray]] = []
    for k in picks:
        idx = tuple(int(i) for i in np.unravel_index(k, lead))
        label = ", ".join(f"{names[a]} chunk {i}" for a, i in enumerate(idx))
        out.append((f" at {label}", (grid.ndim - 2, grid.ndim - 1), grid[idx]))
    return out


def _axis_label(panel: GridPanel, axis: int, vertical: bool = False) -> str:
    """The dimension's name and what one chunk spans: on two lines for a y axis, which is short."""
    n = panel.chunk_shape[axis]
    span = f"chunk index ({n} element{'s' if n != 1 else ''} each)"
    return f"{_dim(panel, axis)}\n{span}" if vertical else f"{_dim(panel, axis)}: {span}"


def _integer_ticks(axis: Axis, n: int) -> None:
    """Integer chunk indices only (every one for short axes)."""
    from matplotlib.ticker import MaxNLocator

    if n <= 12:
        axis.set_ticks(range(n))
    else:
        axis.set_major_locator(MaxNLocator(integer=True))


def _one_chunk_caption(panels: Sequence[GridPanel]) -> str:
    """The caption listing arrays of one chunk: name, mask (or chain) and ratio."""
    parts = []
    for p in panels:
        ratio = float(p.ratios.reshape(-1)[0]) if p.ratios.size else float("nan")
        if np.isnan(ratio):
            state = "not written (equal to the fill value)"
        else:
            mask = int(p.masks.reshape(-1)[0]) if p.masks is not None and p.masks.size else None
            how = f"mask {mask:0{max(len(p.codecs), 1)}b}" if mask is not None and mask >= 0 else (p.chain or "")
            state = f"{how + ', ' if how else ''}{p.ratio_label} {ratio:.2f}"
        parts.append(f"{p.name.split(' (')[0]} ({state})")
    return "One chunk each, not drawn: " + "; ".join(parts) + "."


def _plain_log_labels(axis: Axis) -> None:
    """Tick labels of a log axis as plain numbers (2, 10, 700), minor ones too over two decades or less."""
    from matplotlib.ticker import LogFormatter

    axis.set_major_formatter(LogFormatter())
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 1)))


def _log_norm(values: np.ndarray) -> Normalize:
    from matplotlib.colors import LogNorm

    finite = values[np.isfinite(values) & (values > 0)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (1.0, 1.0)
    if hi <= lo * 1.01:  # one value: a band around it, so the colour bar still has a range
        lo, hi = lo / 1.5, hi * 1.5
    return LogNorm(vmin=lo, vmax=hi)


def _mask_panel(fig: Figure, ax: Axes, p: GridPanel, label: str, masks: np.ndarray, ratios: np.ndarray) -> None:
    """The left panel: each chunk's mask, or (no conditional codec) which chunks were written."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.patches import Patch

    one_d = masks.ndim == 1
    if p.masks is None:
        written = np.where(np.isnan(ratios), 0, 1)
        image = written[None, :] if one_d else written
        ax.imshow(image, cmap=ListedColormap([NOT_WRITTEN, WRITTEN]), vmin=-0.5, vmax=1.5, interpolation="nearest",
                  aspect="auto", origin="lower")
        chain = p.chain or "?"
        ax.set_title(f"{p.name}{label}\none chain for the whole array: {chain} (no masks)", fontsize=9)
        ax.legend(handles=[Patch(color=WRITTEN, label="chunk written"),
                           Patch(color=NOT_WRITTEN, label="chunk equal to the\nfill value: not written")],
                  loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8, frameon=False)
        return
    n = len(p.codecs)
    n_masks = 1 << n
    base = plt.get_cmap("tab10" if n_masks <= 10 else "tab20")
    assert isinstance(base, ListedColormap)  # tab10 and tab20 are lists of colours
    cmap = ListedColormap(np.asarray(base.colors)[:n_masks]).with_extremes(bad=NOT_WRITTEN)
    norm = BoundaryNorm(np.arange(n_masks + 1) - 0.5, n_masks)
    shown = np.ma.masked_less(masks, 0)
    im = ax.imshow(shown[None, :] if one_d else shown, cmap=cmap, norm=norm, interpolation="nearest", aspect="auto",
                   origin="lower")
    bits = ", ".join(f"bit {i} = {c}" for i, c in enumerate(p.codecs)) or "no wrapped codecs"
    head = f"chain: {p.chain}; " if p.chain is not None else ""
    ax.set_title(f"{p.name}{label}\n{head}mask: {bits}\n({NOT_WRITTEN_TEXT})", fontsize=9)
    cb = fig.colorbar(im, ax=ax, ticks=range(n_masks))
    cb.ax.set_yticklabels([f"{m:0{max(n, 1)}b}" for m in range(n_masks)])
    cb.set_label("mask")


def _ratio_panel(fig: Figure, ax: Axes, p: GridPanel, label: str, ratios: np.ndarray, axes: tuple[int, ...]) -> None:
    """The right panel: each chunk's raw / stored bytes on a log scale, one colour scale for all
    the slices of an array (``p.ratios``); blank where not written."""
    if ratios.ndim == 1:
        x = np.arange(ratios.size)
        finite = np.isfinite(ratios)
        ax.bar(x[finite], ratios[finite], width=0.9, color="tab:blue", bottom=0)
        ax.set_yscale("log")
        _plain_log_labels(ax.yaxis)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_ylabel(f"{p.ratio_label}\n(raw / stored, log)")
        ax.set_xlim(-0.5, ratios.size - 0.5)
        ax.set_title(f"{p.name}\n{p.ratio_label} per chunk, log scale (no bar: not written; dashed: 1)", fontsize=9)
        return
    im = ax.imshow(np.ma.masked_invalid(ratios), cmap="viridis", norm=_log_norm(p.ratios), interpolation="nearest",
                   aspect="auto", origin="lower")
    cb = fig.colorbar(im, ax=ax, label="raw / stored bytes (log)")
    _plain_log_labels(cb.ax.yaxis)
    ax.set_title(f"{p.name}{label}\n{p.ratio_label}, log scale (blank: not written)", fontsize=9)


def _keepbits_panel(fig: Figure, ax: Axes, p: GridPanel, label: str, kept: np.ndarray, axes: tuple[int, ...]) -> None:
    image = kept.astype(np.float32)[None, :] if kept.ndim == 1 else kept.astype(np.float32)
    im = ax.imshow(image, cmap="magma", interpolation="nearest", aspect="auto", origin="lower")
    fig.colorbar(im, ax=ax, label="mantissa bits kept")
    ax.set_title(f"{p.name}{label}\nmantissa bits kept per chunk", fontsize=9)


def plot_grids(panels: Sequence[GridPanel], title: str, path: str | os.PathLike[str]) -> None:
    """Write a PNG with, per panel of more than one chunk (and 2-D slice), the mask map and the
    ratio map; panels of one chunk are listed in a caption (see the module docstring).

    Raises ImportError naming the extra to install when matplotlib is missing.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("chunk pictures need matplotlib: pip install matplotlib (or pip install '.[plot]' in a zopt clone)") from exc

    order = sorted(panels, key=lambda p: (p.coordinate, p.name))
    drawn = [p for p in order if p.ratios.size > 1]
    single = [p for p in order if p.ratios.size <= 1]
    rows = []
    for p in drawn:
        masks = p.masks if p.masks is not None else np.full(p.ratios.shape, -1, dtype=np.int16)
        kept = p.keepbits if p.keepbits is not None else np.full(p.ratios.shape, np.nan, dtype=np.float32)
        keep = _kept_axes(p.ratios.shape)
        names = [_dim(p, a) for a in keep]

        def cut(grid: np.ndarray, keep: list[int] = keep, names: list[str] = names) -> list:
            return _slices(grid.reshape([grid.shape[i] for i in keep]), names)

        for (label, axes, m), (_, _, r), (_, _, k) in zip(cut(masks), cut(p.ratios), cut(kept), strict=True):
            rows.append((p, label, tuple(keep[a] for a in axes), m, r, k))
    with_keepbits = any(p.keepbits is not None for p in drawn)
    ncols = 3 if with_keepbits else 2
    caption = textwrap.fill(_one_chunk_caption(single), 60 * ncols) if single else ""
    caption_in = 0.25 + 0.2 * caption.count("\n") if caption else 0.0
    heights = [2.8 if m.ndim == 1 else 3.8 for _, _, _, m, _, _ in rows]
    fig = plt.figure(figsize=(6.5 * ncols, sum(heights) + 0.7 + caption_in + (0.4 if not rows else 0)))
    grid: np.ndarray | list[np.ndarray] = (  # one row of Axes per row
        fig.subplots(len(rows), ncols, squeeze=False, gridspec_kw={"height_ratios": heights}) if rows else [])
    for (p, label, axes, masks, ratios, kept), row in zip(rows, grid, strict=True):
        if with_keepbits:
            _keepbits_panel(fig, row[2], p, label, kept, axes)
        _mask_panel(fig, row[0], p, label, masks, ratios)
        _ratio_panel(fig, row[1], p, label, ratios, axes)
        one_d = masks.ndim == 1
        for ax in row:
            ax.set_xlabel(_axis_label(p, axes[-1]))
            _integer_ticks(ax.xaxis, masks.shape[-1])
            if not one_d:
                ax.set_ylabel(_axis_label(p, axes[0], vertical=True))
                _integer_ticks(ax.yaxis, masks.shape[0])
        if one_d:
            for ax in (row[0], *row[2:]):
                ax.set_yticks([])
    fig.suptitle(title)
    if caption:
        fig.text(0.01, 0.1 / fig.get_figheight(), caption, fontsize=9, va="bottom", ha="left", wrap=False)
    if rows:
        # the figure title gets its own band (0.4 inch), the caption its own at the bottom
        fig.tight_layout(rect=(0, (caption_in + 0.1) / fig.get_figheight(), 1, 1 - 0.4 / fig.get_figheight()))
    fig.savefig(os.fspath(path), dpi=90)
    plt.close(fig)


def plot_plan(plan: Plan, path: str | os.PathLike[str]) -> None:
    """Write a PNG of a ``zopt.planning.plan.Plan``: per array, planned masks and estimated ratios, and
    the kept mantissa bits per chunk for plans that hold them (``zopt.lossy`` keepbits plans)."""
    panels = []
    for name, ap in plan.arrays.items():
        ratios = ap.ratios if ap.ratios is not None else np.full(ap.masks.shape, np.nan, dtype=np.float32)
        planned = ap.masks.astype(np.int16)  # plans store unsigned masks; -1 marks fill chunks
        if ap.ratios is not None:
            planned[np.isnan(ratios)] = -1
        masks: np.ndarray | None = planned
        shape = "×".join(map(str, ap.shape))
        chain = None
        if ap.chain is not None:
            from zopt.cli.tables import chain_text

            chain = chain_text(ap)
            if not any(c["name"] == "conditional" for c in ap.chain):
                masks = None  # a chain without conditional: no mask to draw, the chain is the choice
                chain = chain.split(" (")[0]
        dims = ap.dims
        panels.append(GridPanel(f"{name} ({shape}, {ap.dtype})", masks, ratios, [c["name"] for c in ap.codecs],
                                dims, ap.chunk_shape, "estimated ratio", ap.keepbits, chain,
                                coordinate=dims is not None and len(dims) == 1 and dims[0] == name))
    params = " ".join(f"{k}={v}" for k, v in (plan.params or {}).items())
    plot_grids(panels, f"zopt plan: policy {plan.policy} {params}".rstrip(), path)


def _coordinates(arrays: Sequence[zarr.Array[Any]]) -> set[str]:
    """Names the arrays' attributes mark as coordinates: dimension coordinates (an array named as
    its one dimension), and arrays named by a CF ``coordinates`` or ``bounds`` attribute."""
    names = set()
    for array in arrays:
        dims = getattr(array.metadata, "dimension_names", None)
        leaf = (array.path or "").rsplit("/", 1)[-1]
        if dims and len(dims) == 1 and dims[0] == leaf:
            names.add(leaf)
        for key in ("coordinates", "bounds"):
            value = array.attrs.get(key)
            if isinstance(value, str):
                names.update(value.split())
    return names


def plot_store(store: str | os.PathLike[str], arrays: Sequence[zarr.Array[Any]], path: str | os.PathLike[str]) -> None:
    """Write a PNG of stored chunks of ``arrays`` (zarr arrays of the local ``store``): the mask
    read from each chunk's header and its raw / stored bytes (``zopt.readback.info.chunk_grids``)."""
    from zopt.codecs.conditional import conditional_codecs_in
    from zopt.readback.info import chunk_grids, inner_chunk_shape

    coordinates = _coordinates(arrays)
    panels = []
    for array in arrays:
        if array.ndim == 0:
            continue
        masks, ratios = chunk_grids(store, array)
        metadata_codecs = getattr(array.metadata, "codecs", ()) or ()
        found = conditional_codecs_in(metadata_codecs)
        codecs = [str(c.to_dict()["name"]) for c in found[0].codecs] if found else []
        units = array.attrs.get("units")
        name = (array.path or "/") + (f" [{units}]" if units else "")
        dims = getattr(array.metadata, "dimension_names", None)
        chain = None if masks is not None else chain_words([c.to_dict() for c in metadata_codecs])
        panels.append(GridPanel(f"{name} ({'×'.join(map(str, array.shape))}, {array.dtype})", masks, ratios,
                                codecs, [str(d) for d in dims] if dims else None, inner_chunk_shape(array), chain=chain,
                                coordinate=(array.path or "").rsplit("/", 1)[-1] in coordinates))
    if not panels:
        raise OptionError("png", label="info --png", message=f"{os.fspath(store)!r} has no array of one dimension or more to draw")
    plot_grids(panels, f"zopt info {os.fspath(store)}", path)
