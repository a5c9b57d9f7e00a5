"""Pictures of chunk grids (matplotlib): the ``conditional`` mask and the compression ratio of
every chunk, for a plan (``zopt plan show --png``) or a store (``zopt info --png``).

Only the grid dimensions with more than one chunk are drawn (a 20 × 1 × 1 grid is a strip of
20 cells). A 2-D grid is drawn as two heatmaps (row 0 at the bottom, integer chunk indices on
the axes); an N-D grid as up to ``MAX_SLICES`` 2-D slices along its leading dimensions; a 1-D
grid as a strip of masks and a bar chart of ratios. Plans made with a codec menu name each
array's chosen chain in its panel title. Chunks that are not stored (equal to the fill value) are
grey in the mask panel and blank in the ratio panel. Plans that hold per-chunk keepbits
(``zopt.lossy`` keepbits plans) get a third column: the mantissa bits each chunk keeps.

matplotlib is an optional dependency (``pip install ".[plot]"`` in a zopt clone, or ``pip install matplotlib``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["GridPanel", "plot_grids", "plot_plan", "plot_store"]

#: 2-D slices drawn per array of an N-D grid (evenly spaced along the leading dimensions)
MAX_SLICES = 4
NOT_STORED = "lightgrey"


@dataclass
class GridPanel:
    """One array's chunk grid to draw.

    name : array name (with units, if known, for the title).
    masks : int grid of masks, -1 where not stored; None when the array has no conditional codec.
    ratios : float grid of raw / stored bytes, NaN where not stored.
    codecs : names of the conditional codec's wrapped codecs (bit 0 first).
    dims : dimension names of the array (axis labels), or None.
    chunk_shape : elements per chunk along each dimension.
    ratio_label : what the ratio is ("estimated ratio" for a plan, "ratio" for a store).
    keepbits : int grid of mantissa bits kept per chunk (lossy keepbits plans), or None.
    """

    name: str
    masks: np.ndarray | None
    ratios: np.ndarray
    codecs: Sequence[str]
    dims: Sequence[str] | None
    chunk_shape: Sequence[int]
    ratio_label: str = "ratio"
    keepbits: np.ndarray | None = None
    chain: str | None = None  # the chain chosen from the codec menu (plans made with --menu)


def _kept_axes(shape: Sequence[int]) -> list[int]:
    """The grid axes with more than one chunk (the last axis when none has): only those are drawn,
    so a 20 × 1 × 1 grid is a strip of 20 cells, not panels of one cell each."""
    return [i for i, n in enumerate(shape) if n > 1] or [len(shape) - 1]


def _slices(grid: np.ndarray) -> list[tuple[str, tuple[int, ...], np.ndarray]]:
    """``(label, kept axes, 1-D or 2-D grid)`` slices of a grid."""
    if grid.ndim <= 2:
        return [("", tuple(range(grid.ndim)), grid)]
    lead = grid.shape[:-2]
    flat = int(np.prod(lead))
    picks = sorted({int(round(x)) for x in np.linspace(0, flat - 1, min(MAX_SLICES, flat))})
    out = []
    for k in picks:
        idx = tuple(int(i) for i in np.unravel_index(k, lead))
        out.append((f"[{', '.join(map(str, idx))}, :, :]", (grid.ndim - 2, grid.ndim - 1), grid[idx]))
    return out


def _axis_label(panel: GridPanel, axis: int) -> str:
    dim = panel.dims[axis] if panel.dims else f"dim {axis}"
    n = panel.chunk_shape[axis]
    return f"{dim}: chunk index ({n} element{'s' if n != 1 else ''} per chunk)"


def _integer_ticks(axis: Any, n: int) -> None:
    """Integer chunk indices only (every one for short axes)."""
    from matplotlib.ticker import MaxNLocator

    if n <= 12:
        axis.set_ticks(range(n))
    else:
        axis.set_major_locator(MaxNLocator(integer=True))


def plot_grids(panels: Sequence[GridPanel], title: str, path: str | os.PathLike) -> None:
    """Write a PNG with, per panel (and 2-D slice), the mask map and the ratio map.

    Raises ImportError naming the extra to install when matplotlib is missing.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import BoundaryNorm, ListedColormap
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("chunk pictures need matplotlib: pip install matplotlib (or pip install '.[plot]' in a zopt clone)") from exc

    rows = []
    for p in panels:
        masks = p.masks if p.masks is not None else np.full(p.ratios.shape, -1, dtype=np.int16)
        kept = p.keepbits if p.keepbits is not None else np.full(p.ratios.shape, np.nan, dtype=np.float32)
        keep = _kept_axes(p.ratios.shape)

        def drawn(grid: np.ndarray, keep: list[int] = keep) -> np.ndarray:
            return grid.reshape([grid.shape[i] for i in keep])

        for (label, axes, m), (_, _, r), (_, _, k) in zip(_slices(drawn(masks)), _slices(drawn(p.ratios)),
                                                          _slices(drawn(kept)), strict=True):
            rows.append((p, label, tuple(keep[a] for a in axes), m, r, k))
    with_keepbits = any(p.keepbits is not None for p in panels)
    heights = [1.6 if m.ndim == 1 else 3.6 for _, _, _, m, _, _ in rows]
    ncols = 3 if with_keepbits else 2
    fig, grid = plt.subplots(len(rows), ncols, figsize=(6 * ncols, sum(heights) + 0.8), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for (p, label, axes, masks, ratios, kept), row in zip(rows, grid, strict=True):
        if with_keepbits:
            image = kept.astype(np.float32)[None, :] if kept.ndim == 1 else kept.astype(np.float32)
            im3 = row[2].imshow(image, cmap="magma", interpolation="nearest", aspect="auto", origin="lower")
            fig.colorbar(im3, ax=row[2], label="mantissa bits kept")
            row[2].set_title(f"{p.name}{label}\nmantissa bits kept per chunk", fontsize=10)
            row[2].set_xlabel(_axis_label(p, axes[-1]))
            if kept.ndim == 1:
                row[2].set_yticks([])
            else:
                row[2].set_ylabel(_axis_label(p, axes[0]))
        row = row[:2]
        n = len(p.codecs)
        n_masks = 1 << n
        cmap = ListedColormap(plt.get_cmap("tab10" if n_masks <= 10 else "tab20").colors[:n_masks])
        cmap.set_bad(NOT_STORED)
        norm = BoundaryNorm(np.arange(n_masks + 1) - 0.5, n_masks)
        shown = np.ma.masked_less(masks, 0)
        bits = ", ".join(f"bit {i} = {c}" for i, c in enumerate(p.codecs)) or "no wrapped codecs"
        one_d = masks.ndim == 1
        image = shown[None, :] if one_d else shown
        im = row[0].imshow(image, cmap=cmap, norm=norm, interpolation="nearest", aspect="auto", origin="lower")
        if p.chain is not None:
            row[0].set_title(f"{p.name}{label}\nchain: {p.chain}" + ("" if p.masks is None else f"; mask: {bits}"),
                             fontsize=10)
            if p.masks is not None:
                cb = fig.colorbar(im, ax=row[0], ticks=range(n_masks))
                cb.ax.set_yticklabels([f"{m:0{max(n, 1)}b}" for m in range(n_masks)])
        elif p.masks is None:
            row[0].set_title(f"{p.name}{label}\nno conditional codec (grey: not stored)", fontsize=10)
        else:
            cb = fig.colorbar(im, ax=row[0], ticks=range(n_masks))
            cb.ax.set_yticklabels([f"{m:0{max(n, 1)}b}" for m in range(n_masks)])
            row[0].set_title(f"{p.name}{label}\nmask: {bits} (grey: not stored)", fontsize=10)
        if one_d:
            row[0].set_yticks([])
            x = np.arange(ratios.size)
            row[1].bar(x, np.nan_to_num(ratios, nan=0.0), width=0.9, color="tab:blue")
            row[1].set_ylabel(f"{p.ratio_label}\n(raw / stored bytes)")
            row[1].set_xlim(-0.5, ratios.size - 0.5)
            row[1].set_title(f"{p.name}\n{p.ratio_label} per chunk (no bar: not stored)", fontsize=10)
            for ax in row:
                ax.set_xlabel(_axis_label(p, axes[0]))
        else:
            im2 = row[1].imshow(ratios, cmap="viridis", interpolation="nearest", aspect="auto", origin="lower")
            fig.colorbar(im2, ax=row[1], label="raw / stored bytes")
            row[1].set_title(f"{p.name}{label}\n{p.ratio_label} (blank: not stored)", fontsize=10)
            for ax in row:
                ax.set_xlabel(_axis_label(p, axes[1]))
                ax.set_ylabel(_axis_label(p, axes[0]))
        for ax in row:
            _integer_ticks(ax.xaxis, masks.shape[-1])
            if not one_d:
                _integer_ticks(ax.yaxis, masks.shape[0])
    fig.suptitle(title)
    # leave the figure title its own band (0.5 inch) so it never overlaps the first panels' titles
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_figheight()))
    fig.savefig(os.fspath(path), dpi=90)
    plt.close(fig)


def plot_plan(plan: Any, path: str | os.PathLike) -> None:
    """Write a PNG of a ``zopt.planning.plan.Plan``: per array, planned masks and estimated ratios, and
    the kept mantissa bits per chunk for plans that hold them (``zopt.lossy`` keepbits plans)."""
    panels = []
    for name, ap in plan.arrays.items():
        ratios = ap.ratios if ap.ratios is not None else np.full(ap.masks.shape, np.nan, dtype=np.float32)
        masks = ap.masks.astype(np.int16)  # plans store unsigned masks; -1 marks fill chunks
        if ap.ratios is not None:
            masks[np.isnan(ratios)] = -1
        shape = "×".join(map(str, ap.shape))
        chain = None
        if ap.chain is not None:
            from zopt.cli.tables import chain_text

            chain = chain_text(ap)
            if not any(c["name"] == "conditional" for c in ap.chain):
                masks = None  # a chain without conditional: no mask to draw, the chain is the choice
        panels.append(GridPanel(f"{name} ({shape}, {ap.dtype})", masks, ratios, [c["name"] for c in ap.codecs],
                                None, ap.chunk_shape, "estimated ratio", getattr(ap, "keepbits", None), chain))
    params = " ".join(f"{k}={v}" for k, v in (plan.params or {}).items())
    plot_grids(panels, f"zopt plan: policy {plan.policy} {params}".rstrip(), path)


def plot_store(store: str | os.PathLike, arrays: Sequence[Any], path: str | os.PathLike) -> None:
    """Write a PNG of stored chunks of ``arrays`` (zarr arrays of the local ``store``): the mask
    read from each chunk's header and its raw / stored bytes (``zopt.readback.info.chunk_grids``)."""
    from zopt.codecs.conditional import conditional_codecs_in
    from zopt.readback.info import chunk_grids, inner_chunk_shape

    panels = []
    for array in arrays:
        if array.ndim == 0:
            continue
        masks, ratios = chunk_grids(store, array)
        found = conditional_codecs_in(getattr(array.metadata, "codecs", ()) or ())
        codecs = [c.to_dict()["name"] for c in found[0].codecs] if found else []
        units = array.attrs.get("units")
        name = (array.path or "/") + (f" [{units}]" if units else "")
        dims = getattr(array.metadata, "dimension_names", None)
        panels.append(GridPanel(f"{name} ({'×'.join(map(str, array.shape))}, {array.dtype})", masks, ratios,
                                codecs, list(dims) if dims else None, inner_chunk_shape(array)))
    if not panels:
        raise ValueError(f"info --png: {os.fspath(store)!r} has no array of one dimension or more to draw")
    plot_grids(panels, f"zopt info {os.fspath(store)}", path)
