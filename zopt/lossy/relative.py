"""``rel:R``: a point-wise relative bound ``|x' - x| <= R·|x|``, proven by bitrounding.

Bitrounding to ``K`` mantissa bits (numcodecs' ``BitRound``: round to nearest, ties to even, on
the bit pattern) moves a normal number ``x`` with ``2^e <= |x| < 2^(e+1)`` by at most half a unit
in its ``K``-th place, ``2^(e-K-1) = 2^-(K+1)·2^e <= 2^-(K+1)·|x|`` (a carry into the next
binade lands on ``±2^(e+1)``, still within half a unit). So ``K``, the fewest bits with
``2^-(K+1) <= R`` (decided exactly), proves ``|x' - x| <= R·|x|`` for every normal number.
Subnormal numbers have fewer significant bits and no such bound: they are kept **exactly**, as
are ±0, NaN, ±Infinity, sentinels and values that would round to infinity. Nothing is needed to
decode, so the stored array names no lossy codec and every Zarr v3 reader reads it.

Why not log-domain quantisation: it spends about ``0.35/R`` codes per binade where bitround
spends ``2^K`` (``0.5/R`` to ``1/R``), so it would store up to ~1.5 bits per value less, but it
needs a logarithm codec no other reader has and whose libm rounding cannot be bounded portably;
per-chunk scales cannot be written with ``scale_offset``, whose parameters are per array.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt
from zopt.errors import OptionError

__all__ = ["check_relative", "keep_mask", "rel_keepbits"]


def rel_keepbits(name: str, rel: float, dtype: npt.DTypeLike) -> int:
    """The fewest mantissa bits ``K`` with ``2^-(K+1) <= rel`` for variable ``name`` (float ``dtype``).

    Raises ValueError naming the variable and ``rel`` when ``rel`` is not in (0, 1), or
    needs more bits than ``dtype``'s mantissa (a bound below its precision).
    """
    if not 0 < rel < 1:
        raise OptionError("lossy", label=f"lossy {name}", message=f"rel: the bound must be in (0, 1) (a relative error, e.g. 0.001), got {rel!r}")
    nmant = int(np.finfo(dtype).nmant)
    r = Fraction(rel)
    k = 0
    while Fraction(1, 2 ** (k + 1)) > r:
        k += 1
        if k > nmant:
            raise OptionError("lossy", label=f"lossy {name}", message=f"rel: {rel!r} is below the precision of {np.dtype(dtype).name} "
                             f"(2^-{nmant + 1} with all {nmant} mantissa bits); store it losslessly")
    return k


def keep_mask(values: np.ndarray, special: np.ndarray) -> np.ndarray:
    """``special`` (NaN, ±Infinity, sentinels) or subnormal: the values ``rel`` keeps exactly."""
    tiny = np.finfo(values.dtype).smallest_normal
    with np.errstate(invalid="ignore"):
        return special | ((values != 0) & (np.abs(values) < tiny))


def check_relative(x: np.ndarray, y: np.ndarray, rel: float) -> int:
    """How many finite elements of ``y`` break ``|y - x| <= rel·|x|`` against ``x`` (same shape
    and float dtype), decided exactly (rationals) where float64 cannot tell."""
    finite = np.isfinite(x) & np.isfinite(y)
    xf, yf = x[finite], y[finite]
    xs, ys = xf.astype(np.float64), yf.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        d = np.abs(ys - xs)
        lim = rel * np.abs(xs)
    unsure = np.abs(d - lim) <= 4 * np.finfo(np.float64).eps * np.maximum(d, lim)
    bad = (d > lim) & ~unsure
    for i in np.flatnonzero(unsure):
        a, b = Fraction(float(xf[i])), Fraction(float(yf[i]))
        bad[i] = abs(b - a) > Fraction(rel) * abs(a)
    return int(bad.sum())
