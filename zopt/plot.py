"""Pictures of plans: masks and estimated ratios over the chunk grid (matplotlib).

matplotlib is an optional dependency (``pip install zopt[plot]``).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["plot_plan"]

#: 2-D slices drawn per array of an N-D grid (evenly spaced along the leading dimensions)
MAX_SLICES = 4


def _slices(grid: np.ndarray) -> list[tuple[str, np.ndarray]]:
    if grid.ndim == 1:
        return [("", grid[None, :])]
    if grid.ndim == 2:
        return [("", grid)]
    lead = grid.shape[:-2]
    flat = int(np.prod(lead))
    picks = sorted({int(round(x)) for x in np.linspace(0, flat - 1, min(MAX_SLICES, flat))})
    out = []
    for k in picks:
        idx = np.unravel_index(k, lead)
        out.append((f"[{', '.join(map(str, idx))}, :, :]", grid[idx]))
    return out


def plot_plan(plan: Any, path: str | os.PathLike) -> None:
    """Write a PNG: per array and 2-D slice, the mask heatmap and the estimated-ratio heatmap,
    and the kept mantissa bits per chunk for plans that hold them (``zopt.lossy`` keepbits plans).

    Raises ImportError naming the extra to install when matplotlib is missing.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import BoundaryNorm, ListedColormap
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("plan pictures need matplotlib: pip install 'zopt[plot]'") from exc

    panels = []
    with_keepbits = any(getattr(ap, "keepbits", None) is not None for ap in plan.arrays.values())
    for name, ap in plan.arrays.items():
        ratios = ap.ratios if ap.ratios is not None else np.full(ap.masks.shape, np.nan, dtype=np.float32)
        kb = getattr(ap, "keepbits", None)
        kb = kb if kb is not None else np.full(ap.masks.shape, np.nan, dtype=np.float32)
        for (label, masks), (_, rat), (_, kbs) in zip(_slices(ap.masks), _slices(ratios), _slices(kb), strict=True):
            panels.append((f"{name}{label}", masks, rat, kbs, len(ap.codecs), [c["name"] for c in ap.codecs]))
    ncols = 3 if with_keepbits else 2
    fig, axes = plt.subplots(len(panels), ncols, figsize=(5.5 * ncols, 3.6 * len(panels)), squeeze=False)
    for row, (title, masks, rat, kbs, n, names) in zip(axes, panels, strict=True):
        if with_keepbits:
            im3 = row[2].imshow(kbs.astype(np.float32), cmap="magma", interpolation="nearest", aspect="auto")
            fig.colorbar(im3, ax=row[2])
            row[2].set_title(f"{title}: mantissa bits kept")
        n_masks = 1 << n
        cmap = ListedColormap(plt.get_cmap("tab10" if n_masks <= 10 else "tab20").colors[:n_masks])
        norm = BoundaryNorm(np.arange(n_masks + 1) - 0.5, n_masks)
        im = row[0].imshow(masks, cmap=cmap, norm=norm, interpolation="nearest", aspect="auto")
        cb = fig.colorbar(im, ax=row[0], ticks=range(n_masks))
        cb.ax.set_yticklabels([f"{m:0{max(n, 1)}b}" for m in range(n_masks)])
        row[0].set_title(f"{title}: mask (bit 0 = {names[0] if names else '-'})")
        im2 = row[1].imshow(rat, cmap="viridis", interpolation="nearest", aspect="auto")
        fig.colorbar(im2, ax=row[1])
        row[1].set_title(f"{title}: estimated ratio (blank: fill chunks)")
        for ax in row:
            ax.set_xlabel("chunk index (last dim)")
            ax.set_ylabel("chunk index")
    fig.suptitle(f"zopt plan: policy {plan.policy} {plan.params or ''}")
    fig.tight_layout()
    fig.savefig(os.fspath(path), dpi=90)
    plt.close(fig)
