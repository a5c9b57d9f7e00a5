"""Bitwise real information content (Klöwer et al. 2021, Nat. Comput. Sci. 1, 713–724) and keepbits.

The real information of bit position ``i`` is the mutual information between bit ``i`` of an
element and bit ``i`` of its neighbour along a dimension,

    I_i = sum_{r,s in {0,1}} p_rs · log2(p_rs / (p_r· · p_·s)),

from the 2×2 joint frequencies ``p_rs`` of (bit of ``x[j]``, bit of ``x[j+1]``). Floats are first
put in "signed exponent" form (sign, exponent sign, |unbiased exponent|, mantissa) as
BitInformation.jl and xbitinfo do, so small exponent changes do not flip many bits.

``pair_counts(x, valid)`` gives the (``ndim``, ``nbits``, 4) counts of one block (pairs along every
dimension, in one pass per dimension over the bytes with ``np.unpackbits``); counts add up
over blocks, so a Dask graph sums block counts (``info_graph``) for a whole variable, or keeps
them per chunk. Pairs touching a NaN or a sentinel (``valid`` false) are left out (xbitinfo's
python code counts them); pairs across block boundaries are not seen (one pair in
``chunk length`` per dimension).

``keepbits(counts, level)``: per dimension, the information per bit with bits below the
significance threshold set to 0 (``confidence``, BitInformation.jl's ``set_zero_insignificant``:
the information a random bit shows in ``n`` pairs at that confidence; ``None`` switches it off,
as xbitinfo's python implementation does), then xbitinfo's ``get_keepbits`` rule: bits not above
1.5× the largest of the last four bits are dropped, the cumulative sum is normalised, and the
number of mantissa bits kept is the first bit where it exceeds ``level`` minus the sign and
exponent bits (all mantissa bits for ``level == 1``). The result is the maximum over the
dimensions (conservative: each dimension's correlations are kept), clipped to ``[0, nmant]``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["bit_information", "keepbits", "keepbits_from_info", "pair_counts", "signed_exponent"]

_UINT: dict[int, type[np.unsignedinteger]] = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def signed_exponent(x: np.ndarray) -> np.ndarray:
    """Bit patterns (unsigned ints, same width) of float ``x`` in signed-exponent form.

    The biased exponent ``e`` becomes a sign bit (``e - bias < 0``) and ``|e - bias|`` in the
    remaining exponent bits (as BitInformation.jl's ``signed_exponent``); sign and mantissa stay.
    """
    fi = np.finfo(x.dtype)
    ut = _UINT[x.dtype.itemsize]
    nbits, nmant = fi.bits, fi.nmant
    nexp = nbits - nmant - 1
    bias = (1 << (nexp - 1)) - 1
    ui = np.ascontiguousarray(x).view(ut)
    sf = ui & ut((1 << (nbits - 1)) | ((1 << nmant) - 1))
    e = ((ui >> ut(nmant)) & ut((1 << nexp) - 1)).astype(np.int64) - bias
    eabs = (np.abs(e) % (1 << (nexp - 1))).astype(ut)  # xbitinfo: |e| modulo the field
    esign = np.where(e < 0, ut(1 << (nbits - 2)), ut(0))
    return sf | esign | (eabs << ut(nmant))


def _bits_msb_first(u: np.ndarray) -> np.ndarray:
    """(n, nbits) uint8 0/1 matrix of 1-D unsigned ``u``, most significant bit first."""
    be = u.astype(u.dtype.newbyteorder(">"), copy=False)
    return np.unpackbits(be.view(np.uint8).reshape(u.size, u.dtype.itemsize), axis=1)


def pair_counts(x: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """Bit-pair counts of one block: int64 array (ndim, nbits, 4), index ``2·a + b`` for the
    bit ``a`` of an element and ``b`` of its successor along each dimension.

    x : float16/32/64 or integer array, any shape. valid : bool array of ``x``'s shape; pairs
    with an invalid element are not counted (None: all valid).
    """
    x = np.asarray(x)
    u = signed_exponent(x) if x.dtype.kind == "f" else np.ascontiguousarray(x).view(_UINT.get(x.dtype.itemsize, np.uint8))
    nbits = x.dtype.itemsize * 8
    out = np.zeros((max(x.ndim, 1), nbits, 4), np.int64)
    if x.ndim == 0:
        return out
    for axis in range(x.ndim):
        if x.shape[axis] < 2:
            continue
        lo = [slice(None)] * x.ndim
        hi = [slice(None)] * x.ndim
        lo[axis], hi[axis] = slice(0, -1), slice(1, None)
        a, b = u[tuple(lo)], u[tuple(hi)]
        if valid is not None:
            keep = valid[tuple(lo)] & valid[tuple(hi)]
            a, b = a[keep], b[keep]
        else:
            a, b = a.reshape(-1), b.reshape(-1)
        n = a.size
        if n == 0:
            continue
        ones_a = _bits_msb_first(a).sum(axis=0, dtype=np.int64)
        ones_b = _bits_msb_first(b).sum(axis=0, dtype=np.int64)
        both = _bits_msb_first(a & b).sum(axis=0, dtype=np.int64)
        out[axis, :, 3] = both
        out[axis, :, 2] = ones_a - both
        out[axis, :, 1] = ones_b - both
        out[axis, :, 0] = n - ones_a - ones_b + both
    return out


def bit_information(counts: np.ndarray) -> np.ndarray:
    """Mutual information (bits) per bit position from pair counts (..., nbits, 4) → (..., nbits)."""
    c = np.asarray(counts, dtype=np.float64)
    n = c.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = c / n
        p = p.reshape(*p.shape[:-1], 2, 2)
        pr = p.sum(axis=-1, keepdims=True)
        ps = p.sum(axis=-2, keepdims=True)
        terms = np.where(p > 0, p * np.log2(p / (pr * ps)), 0.0)
    info = terms.sum(axis=(-1, -2))
    return np.where(n[..., 0] > 0, np.maximum(info, 0.0), 0.0)


def _free_entropy_threshold(n: int, confidence: float) -> float:
    """Information a random bit shows in ``n`` pairs at ``confidence`` (BitInformation.jl)."""
    if n <= 0:
        return math.inf
    from statistics import NormalDist

    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = min(0.5 + z / (2 * math.sqrt(n)), 1.0)
    if p >= 1.0:
        return 1.0
    return 1.0 + p * math.log2(p) + (1 - p) * math.log2(1 - p)


def keepbits_from_info(info: np.ndarray, level: float, dtype: npt.DTypeLike) -> int:
    """Mantissa bits to keep for one dimension's information per bit (xbitinfo's ``get_keepbits``)."""
    fi = np.finfo(dtype)
    nmant = int(fi.nmant)
    if level >= 1.0:
        return nmant
    info = np.asarray(info, dtype=np.float64)
    cleaned = np.where(info > info[-4:].max() * 1.5, info, 0.0)
    total = cleaned.sum()
    if total <= 0:
        return 0
    cdf = np.cumsum(cleaned) / total
    first = int(np.argmax(cdf > level))
    return int(min(max(first + 1 - (fi.bits - nmant), 0), nmant))


def keepbits(counts: np.ndarray, level: float, dtype: npt.DTypeLike, confidence: float | None = 0.99) -> int:
    """Mantissa bits that keep ``level`` of the real information, from ``pair_counts`` (summed
    over blocks): the maximum over dimensions of ``keepbits_from_info``."""
    counts = np.asarray(counts)
    best = 0
    for dim_counts in counts:
        n = int(dim_counts[0].sum())
        if n == 0:
            continue
        info = bit_information(dim_counts)
        if confidence is not None:
            info = np.where(info > _free_entropy_threshold(n, confidence), info, 0.0)
        best = max(best, keepbits_from_info(info, level, dtype))
    return best
