"""Exact value conversion between real data types: the arithmetic of ``cast_value``.

``cast_array(values, target, rounding=, out_of_range=, scalar_map=)`` converts every element to
``target`` as the ``cast_value`` procedure of ``../shared/specs/scale_offset_cast_value.md``
prescribes: (1) ``scalar_map``, (2) exact representation, (3) ``rounding`` then
``out_of_range``, (4) otherwise an error. Any pair of real types works, including ``int2``/
``uint2``/``int4``/``uint4``, ``float4_e2m1fn``, ``float6_*``, ``float8_*`` and ``bfloat16``.
Nothing relies on numpy's or ml_dtypes' own casts where they round, saturate or wrap: values are
compared exactly against the target's representable values.

How each case stays exact (all vectorised):

- Where every source value is a value of the target (numpy integer and float types widening:
  ``uint16 → float32``, ``float32 → float64``, the same type, or integers whose values in this
  array lie within ``±2^(nmant+1)`` of a float target), numpy's ``astype`` is exact and is the
  whole conversion, with ``scalar_map`` applied as masked stores (``zopt.codecs.widening``). This is every
  decode of the lossy chains (``uintN`` codes → the float type, the sentinel map ``float32 →
  float32``), at numpy's speed (``benchmarks/cast.py``).
- Sources of at most 16 bits go through a lookup table of every bit pattern, built once per
  (source, target, rounding, out_of_range, scalar_map) by the general kernels below.
- float32 → float types of at most 16 bits go through a table over (top bits, sticky bit) of the
  float32 pattern, which determines the rounded result in every mode (``_float32_table``).
- float → float: for targets of at most 16 bits the library's own cast gives a candidate whose
  neighbour in the sorted table of representable values completes the bracketing pair (binary
  search where the candidate is not adjacent: saturated, NaN on overflow, double rounded), and
  the pair decides; for ``float32`` numpy's
  round-to-nearest-even cast gives a candidate whose float32 neighbours are compared in float64
  (neighbours and midpoints are exact there). Ties use the even bit pattern.
- int → float64: the residual ``x - float64(x)`` is computed exactly in 64-bit integers
  (``|residual| ≤ 2^11``) and decides directed rounding and nearest-away ties.
  int → narrower floats: the integer is first rounded to float64 *to odd*, which preserves the
  correct rounding to any format of at most 51 significant bits.
- float → int: round to an integer in float64 (``rint``/``trunc``/``ceil``/``floor``; nearest-away
  as ``trunc(x) + sign(x)·(|x − trunc(x)| ≥ ½)`` with an exact fraction, not
  ``floor(|x| + ½)``), then range checks against exact powers of two.
- ``wrap`` reduces modulo 2^N exactly (``fmod`` by 2^64, then the low N bits).

Out of range means "the value rounded with an unbounded exponent lies outside the target's
finite range": for a float target the step beyond the largest finite value is one unit in the
last place of the top binade (float16: 65536; float8_e4m3fn: 480, the pattern its NaN took).
``clamp`` then gives ±Infinity for targets with infinities and the largest/smallest finite value
otherwise, as cast-value-rs does. NaN propagates between types with NaN; NaN or ±Infinity into a
type without them is an error even with ``clamp`` unless ``scalar_map`` maps it. Signed zero is
kept for targets with −0; ``fnuz`` types and integers give +0.

``scalar_map`` keys match by IEEE equality, except that a NaN key matches every NaN (any sign or
payload): ``0`` and ``-0.0`` keys both match both zeros. This is cast-value-rs's rule (zarrs
compares bit patterns); the first matching entry wins and mapped values are not cast again.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from zopt.codecs.widening import widen, widens_exactly
from zopt.dtypes.numeric import NumericInfo, numeric_info
from zopt.errors import OptionError, ZoptError

__all__ = ["OUT_OF_RANGE", "ROUNDING", "CastError", "cast_array", "cast_error", "check_cast_options"]

ROUNDING = ("nearest-even", "towards-zero", "towards-positive", "towards-negative", "nearest-away")
OUT_OF_RANGE = (None, "clamp", "wrap")

_OK, _RANGE, _NAN, _INF = 0, 1, 2, 3
_TWO63 = float(2**63)
_TWO64 = float(2**64)
_F32_VIRTUAL = float(2**128)
_BLOCK = 1 << 16


class CastError(ZoptError, ValueError):
    """A value that cannot be converted: names the value, the rule that failed and where.

    value : the first offending element (as a Python scalar).  rule : which rule failed.
    count : how many elements failed.  position : its index in the array.
    """

    def __init__(self, message: str, *, value: object = None, rule: str = "", count: int = 1,
                 position: tuple[int, ...] | None = None) -> None:
        super().__init__(message)
        self.value, self.rule, self.count, self.position = value, rule, count, position


def check_cast_options(rounding: object, out_of_range: object, target: NumericInfo | None = None) -> None:
    """ValueError naming ``rounding`` or ``out_of_range`` and the allowed values."""
    if rounding not in ROUNDING:
        raise OptionError("rounding", f"{rounding!r} is not one of {', '.join(ROUNDING)}")
    if out_of_range not in OUT_OF_RANGE:
        raise OptionError("out_of_range", f"{out_of_range!r} is not one of 'clamp', 'wrap' (or absent)")
    if out_of_range == "wrap" and target is not None and not target.is_int:
        raise OptionError("out_of_range", f"'wrap' applies only to integer targets, not {target.name}; "
                         "use 'clamp' or leave it absent")


# -- helpers ------------------------------------------------------------------------------------
def _canonical(values: np.ndarray, info: NumericInfo) -> np.ndarray:
    """Exact values: float64 for floats, int64 for integers (uint64 for uint64)."""
    if info.is_int:
        return values.astype(np.uint64 if info.dtype == np.uint64 else np.int64)
    with np.errstate(invalid="ignore"):  # ml_dtypes warns on NaN, which widens exactly
        return values.astype(np.float64)


def _f64_to_u64_mod(r: np.ndarray) -> np.ndarray:
    """Integer-valued finite float64 → uint64 equal to it modulo 2^64 (exact)."""
    m = np.fmod(r, _TWO64)
    a = np.abs(m)
    big = a >= _TWO63
    u = np.where(big, a - _TWO63, a).astype(np.uint64)
    with np.errstate(over="ignore"):  # modulo 2^64 on purpose
        u += np.where(big, np.uint64(1 << 63), np.uint64(0))
        return np.where(m < 0, ~u + np.uint64(1), u)


def _wrap_u64(u: np.ndarray, tgt: NumericInfo) -> np.ndarray:
    """The low ``tgt.bits`` bits of uint64 ``u`` as ``tgt`` (two's complement for signed)."""
    n = tgt.bits
    if n == 64:
        return u.view(np.int64) if tgt.signed else u
    low = u & np.uint64((1 << n) - 1)
    if not tgt.signed:
        return low.astype(tgt.dtype)
    s = low.astype(np.int64)
    s -= np.where(low >= np.uint64(1 << (n - 1)), np.int64(1 << n), np.int64(0))
    return s.astype(tgt.dtype)


def _choose_hi(v: np.ndarray, lo: np.ndarray, hi: np.ndarray, lo_even: np.ndarray | None, rounding: str) -> np.ndarray:
    """For lo < v < hi (float64, exact): True where ``rounding`` picks ``hi``; ``lo_even`` (where
    ``lo`` is even) is needed for ``nearest-even`` only."""
    if rounding == "towards-positive":
        return np.ones(v.shape, bool)
    if rounding == "towards-negative":
        return np.zeros(v.shape, bool)
    if rounding == "towards-zero":
        return v < 0
    mid = (lo + hi) * 0.5
    tie = v == mid
    out = v > mid
    if rounding == "nearest-even":
        if lo_even is None:
            raise ValueError("rounding: 'nearest-even' needs lo_even")
        return out | (tie & ~lo_even)
    return out | (tie & (v > 0))


def _round_to_integer(v: np.ndarray, rounding: str) -> np.ndarray:
    if rounding == "nearest-even":
        return np.rint(v)
    if rounding == "towards-zero":
        return np.trunc(v)
    if rounding == "towards-positive":
        return np.ceil(v)
    if rounding == "towards-negative":
        return np.floor(v)
    t = np.trunc(v)
    return t + np.where(np.abs(v - t) >= 0.5, np.sign(v), 0.0)


def _int_residual(x: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Exact ``x - f`` (int64) for integers ``x`` and f = float64(x) (|x - f| ≤ 2^11)."""
    u = x.view(np.uint64) if x.dtype == np.int64 else x
    with np.errstate(over="ignore"):  # modulo 2^64 on purpose
        return np.asarray(u - _f64_to_u64_mod(f)).view(np.int64)


def _int_to_float64_odd(x: np.ndarray) -> np.ndarray:
    """Integers → float64 rounded to odd (exact below 2^53)."""
    f = x.astype(np.float64)
    d = _int_residual(x, f)
    fix = (d != 0) & ((f.view(np.uint64) & np.uint64(1)) == 0)
    if fix.any():
        f = np.where(fix, np.nextafter(f, np.where(d > 0, np.inf, -np.inf)), f)
    return f


# -- kernels: each returns (out of the target dtype, status uint8) --------------------------------
def _int_to_int(x: np.ndarray, tgt: NumericInfo, out_of_range: str | None) -> tuple[np.ndarray, np.ndarray]:
    if x.dtype == np.uint64:
        below = np.zeros(x.shape, bool)
        above = x > np.uint64(tgt.hi)
        u = x
    else:
        below = x < np.int64(max(tgt.lo, -(2**63)))
        above = x > np.int64(tgt.hi) if tgt.hi < 2**63 else np.zeros(x.shape, bool)
        u = x.view(np.uint64)
    out = _wrap_u64(u, tgt)
    return _apply_range(out, below, above, tgt, out_of_range)


def _apply_range(out: np.ndarray, below: np.ndarray, above: np.ndarray, tgt: NumericInfo,
                 out_of_range: str | None) -> tuple[np.ndarray, np.ndarray]:
    status = np.zeros(out.shape, np.uint8)
    if out_of_range == "wrap":
        return out, status
    if out_of_range == "clamp":
        if tgt.is_int:
            lo, hi = np.array(tgt.lo).astype(tgt.dtype), np.array(tgt.hi).astype(tgt.dtype)
        else:
            hi_v = np.inf if tgt.has_inf else tgt.max
            lo_v = -hi_v if tgt.signed else float(tgt.value_table[1])
            # max, ±inf and the smallest positive value are representable: astype is exact
            lo, hi = np.array(lo_v).astype(tgt.dtype), np.array(hi_v).astype(tgt.dtype)
        out = np.where(below, lo, np.where(above, hi, out)).astype(tgt.dtype)
        return out, status
    status[below | above] = _RANGE
    return out, status


def _float_to_int(v: np.ndarray, tgt: NumericInfo, rounding: str, out_of_range: str | None):
    finite = np.isfinite(v)
    all_finite = bool(finite.all())
    r = _round_to_integer(v if all_finite else np.where(finite, v, 0.0), rounding)
    below = r < float(tgt.lo)
    above = r >= float(tgt.hi + 1)
    if out_of_range == "wrap":
        u = _f64_to_u64_mod(r) if (np.abs(r) >= _TWO63).any() else r.astype(np.int64).view(np.uint64)
        out = _wrap_u64(u, tgt)
    else:
        if below.any() or above.any():
            r = np.where(below | above, 0.0, r)
        # in range: int64 holds every target but uint64, whose top half needs the modular path
        out = _wrap_u64(_f64_to_u64_mod(r), tgt) if tgt.dtype == np.uint64 else r.astype(np.int64).astype(tgt.dtype)
    out, status = _apply_range(out, below, above, tgt, out_of_range)
    if not all_finite:
        status[np.isnan(v)] = _NAN
        status[np.isinf(v)] = _INF
    return out, status


def _float_specials(v: np.ndarray, out: np.ndarray, status: np.ndarray, tgt: NumericInfo) -> np.ndarray:
    """NaN and ±Infinity elements of ``v`` into ``out``/``status`` (returns ``out``)."""
    for mask, representable, failure in ((np.isnan(v), tgt.has_nan, _NAN), (np.isinf(v), tgt.has_inf, _INF)):
        if not mask.any():
            continue
        if representable:
            with np.errstate(all="ignore"):
                out = np.where(mask, v.astype(tgt.dtype), out)
        status[mask] = _OK if representable else failure
    return out


def _float_to_table(v: np.ndarray, tgt: NumericInfo, rounding: str, out_of_range: str | None):
    table = tgt.value_table
    n = table.size
    # A candidate from the library's own cast, then its neighbour in the sorted table: a
    # bracket table[lo] <= v <= table[hi] found with two lookups. Where the candidate is not
    # adjacent (saturated, NaN for overflow, double rounding), binary search instead.
    with np.errstate(all="ignore"):
        cand = v.astype(tgt.dtype).view(tgt.code_dtype)
    if tgt.bits < 8 * tgt.dtype.itemsize:
        cand = cand & tgt.code_dtype.type((1 << tgt.bits) - 1)
    pos = tgt.position_table[cand]
    lo_i = pos - (table[pos] >= v)
    np.clip(lo_i, 0, n - 2, out=lo_i)
    lo_v, hi_v = table[lo_i], table[lo_i + 1]
    valid = (pos >= 0) & (lo_v <= v) & (v <= hi_v)
    if not valid.all():
        bad = ~valid
        lo_i[bad] = np.clip(np.searchsorted(table, v[bad], side="left"), 1, n - 1) - 1
        lo_v, hi_v = table[lo_i], table[lo_i + 1]
    if rounding.startswith("nearest"):
        mid = tgt.midpoints[lo_i]
        pick_hi = v > mid
        tie = v == mid
        pick_hi |= tie & (tgt.odd_codes[lo_i] if rounding == "nearest-even" else v > 0)
    else:
        pick_hi = _choose_hi(v, lo_v, hi_v, None, rounding)
    pick_hi = (pick_hi & (v != lo_v)) | (v == hi_v)  # exact values stay
    r = lo_i + pick_hi
    finite = np.isfinite(v)
    outside = (r == 0) | (r == n - 1) | (v < table[0]) | (v > table[-1])
    all_finite = bool(finite.all())
    if not all_finite:
        outside &= finite
    code = tgt.out_codes[r]
    if tgt.has_neg_zero:
        negzero = (r == tgt.position_table[tgt.zero_code]) & np.signbit(v)
        if negzero.any():
            code[negzero] = tgt.neg_zero_code
    out = code.view(tgt.dtype)
    out, status = _apply_range(out, outside & (v < 0), outside & (v > 0), tgt, out_of_range)
    if not all_finite:
        out = _float_specials(v, out, status, tgt)
    return out, status


def _float_to_float32(v: np.ndarray, tgt: NumericInfo, rounding: str, out_of_range: str | None):
    with np.errstate(over="ignore", invalid="ignore"):
        c = v.astype(np.float32)
        c64 = c.astype(np.float64)
        below = c64 < v
        lo = np.where(below, c, np.nextafter(c, np.float32(-np.inf)))
        hi = np.where(below, np.nextafter(c, np.float32(np.inf)), c)
    lo64 = np.clip(lo.astype(np.float64), -_F32_VIRTUAL, _F32_VIRTUAL)
    hi64 = np.clip(hi.astype(np.float64), -_F32_VIRTUAL, _F32_VIRTUAL)
    pick_hi = _choose_hi(v, lo64, hi64, (lo.view(np.uint32) & 1) == 0, rounding)
    r = np.where(c64 == v, c, np.where(pick_hi, hi, lo))
    finite = np.isfinite(v)
    outside = finite & (np.isinf(r) | (np.abs(v) >= _F32_VIRTUAL))
    r = np.where(r == 0, np.copysign(np.float32(0), v).astype(np.float32), r)
    out, status = _apply_range(r, outside & (v < 0), outside & (v > 0), tgt, out_of_range)
    return _float_specials(v, out, status, tgt), status


def _int_to_float64(x: np.ndarray, rounding: str) -> tuple[np.ndarray, np.ndarray]:
    f = x.astype(np.float64)
    d = _int_residual(x, f)
    status = np.zeros(x.shape, np.uint8)
    if rounding == "nearest-even" or not d.any():
        return f, status
    lo = np.where(d > 0, f, np.nextafter(f, -np.inf))
    hi = np.where(d > 0, np.nextafter(f, np.inf), f)
    neg = (x < 0) if x.dtype == np.int64 else np.zeros(x.shape, bool)
    if rounding == "towards-positive":
        pick_hi = np.ones(x.shape, bool)
    elif rounding == "towards-negative":
        pick_hi = np.zeros(x.shape, bool)
    elif rounding == "towards-zero":
        pick_hi = neg
    else:  # nearest-away: f is the nearest; on a tie take the larger magnitude
        tie = 2.0 * np.abs(d).astype(np.float64) == (hi - lo)
        pick_hi = np.where(tie, ~neg, f == hi)
    return np.where(d == 0, f, np.where(pick_hi, hi, lo)), status


def _convert(x: np.ndarray, src: NumericInfo, tgt: NumericInfo, rounding: str, out_of_range: str | None):
    """Canonical source values ``x`` → (target array, status)."""
    if tgt.is_int:
        if src.is_int:
            return _int_to_int(x, tgt, out_of_range)
        return _float_to_int(x, tgt, rounding, out_of_range)
    if tgt.dtype == np.float64:
        if src.is_int:
            return _int_to_float64(x, rounding)
        return x.copy(), np.zeros(x.shape, np.uint8)
    v = _int_to_float64_odd(x) if src.is_int else x
    if tgt.dtype == np.float32:
        return _float_to_float32(v, tgt, rounding, out_of_range)
    return _float_to_table(v, tgt, rounding, out_of_range)


def _map_mask(x: np.ndarray, key: object, src: NumericInfo) -> np.ndarray:
    if src.is_int:
        return x == _canonical(np.array(key), src)
    k = float(np.array(key).astype(np.float64))
    return np.isnan(x) if np.isnan(k) else x == k


def _apply_scalar_map(x: np.ndarray, out: np.ndarray, status: np.ndarray, src: NumericInfo,
                      tgt: NumericInfo, scalar_map: Sequence[tuple[Any, Any]]) -> np.ndarray:
    mapped = np.zeros(x.shape, bool)
    for key, value in scalar_map:
        m = _map_mask(x, key, src) & ~mapped
        if m.any():
            out = np.where(m, np.array(value).astype(tgt.dtype), out)
            mapped |= m
    status[mapped] = _OK
    return out


@functools.lru_cache(maxsize=256)
def _lookup_table(src: NumericInfo, tgt: NumericInfo, rounding: str, out_of_range: str | None,
                  scalar_map: tuple[tuple[bytes, bytes], ...]) -> tuple[np.ndarray, np.ndarray]:
    codes = np.arange(1 << src.bits, dtype=np.int64)
    x = _canonical(src.from_codes(codes), src)
    out, status = _convert(x, src, tgt, rounding, out_of_range)
    pairs = [(np.frombuffer(k, src.dtype)[0], np.frombuffer(v, tgt.dtype)[0]) for k, v in scalar_map]
    out = _apply_scalar_map(x, out, status, src, tgt, pairs)
    return np.ascontiguousarray(out), status


def _float32_key_shift(tgt: NumericInfo) -> int:
    """How many low float32 bits only matter as "any set" when rounding to ``tgt``.

    Kept: sign, exponent, the target's mantissa bits and a rounding bit (``22 - nmant`` below
    them) — and, where the target reaches into float32's subnormals (bfloat16, float8_e8m0fnu),
    every bit down to half the target's smallest spacing, whose position there is absolute
    (bit ``k`` is ``2^(k - 149)``).
    """
    smallest_step = float(np.diff(tgt.value_table).min())
    return min(22 - tgt.nmant, 148 + int(np.floor(np.log2(smallest_step))))


@functools.lru_cache(maxsize=64)
def _float32_table(tgt: NumericInfo, rounding: str, out_of_range: str | None) -> tuple[np.ndarray, np.ndarray]:
    """float32 → a float type of at most 16 bits, as a table over (top bits, sticky bit).

    Rounding a float32 to a type with ``m`` mantissa bits depends only on its sign, exponent,
    top ``m + 1`` mantissa bits (the last one is the rounding bit) and on whether any lower bit
    is set (the sticky bit). Key = those top bits, then the sticky bit: 2^14 keys for
    float8_e4m3, 2^18 for bfloat16, 2^21 for float16 (see ``_float32_key_shift``). Each key's result is computed once by the exact kernel from a
    representative float32 with that key.
    """
    shift = _float32_key_shift(tgt)
    keys = np.arange(1 << (33 - shift), dtype=np.uint32)
    reps = ((keys >> np.uint32(1)) << np.uint32(shift)) | (keys & np.uint32(1))
    src = numeric_info(np.float32)
    out, status = _convert(_canonical(reps.view(np.float32), src), src, tgt, rounding, out_of_range)
    return np.ascontiguousarray(out), status


def _float32_keys(values: np.ndarray, shift: int) -> np.ndarray:
    u = values.view(np.uint32)
    key = (u >> np.uint32(shift)) << np.uint32(1)
    key |= (u & np.uint32((1 << shift) - 1)) != 0
    return key


def _raise_first(values: np.ndarray, status: np.ndarray, src: NumericInfo, tgt: NumericInfo,
                 rounding: str, where: str | None, offset: int = 0, count: int | None = None) -> None:
    """status: of ``values.flat[offset:]``; count: failures in all of ``values``."""
    bad = np.flatnonzero(status)
    kind = int(status.flat[int(bad[0])])
    i = offset + int(bad[0])
    count = int(bad.size) if count is None else count
    if kind == _RANGE:
        rule = "out_of_range"
        why = (f"is out of range for {tgt.name} {tgt.describe_range()} after {rounding} rounding, "
               "and out_of_range is not set (use 'clamp' or 'wrap', or a scalar_map entry)")
    elif kind == _NAN:
        rule = "special values"
        why = f"(NaN) has no {tgt.name} representation and scalar_map does not map it"
    else:
        rule = "special values"
        why = f"(±Infinity) has no {tgt.name} representation and scalar_map does not map it (clamp does not apply)"
    raise cast_error(f"cast_value {src.name} → {tgt.name}", values, i, why, rule=rule, count=count, where=where)


def cast_error(what: str, values: np.ndarray, index: int, why: str, *, rule: str, count: int,
               where: str | None) -> CastError:
    """A ``CastError`` for element ``index`` (flat) of ``values``: ``"{what} in {where}: value …
    at index (…) {why}"``, the value as a Python int or float."""
    element = np.asarray(values.flat[index])
    info = numeric_info(values.dtype)
    value: int | float
    if info.is_int:
        value = int(element.astype(np.uint64 if info.dtype == np.uint64 else np.int64))
    else:
        value = float(element.astype(np.float64))
    pos = tuple(int(p) for p in np.unravel_index(index, values.shape)) if values.ndim else ()
    at = f" in {where}" if where else ""
    more = f" ({count} elements fail)" if count > 1 else ""
    return CastError(f"{what}{at}: value {value!r} at index {pos} {why}{more}",
                     value=value, rule=rule, count=count, position=pos)


def cast_array(
    values: np.ndarray,
    target: np.dtype[Any] | str,
    *,
    rounding: str = "nearest-even",
    out_of_range: str | None = None,
    scalar_map: Sequence[tuple[Any, Any]] = (),
    where: str | None = None,
) -> np.ndarray:
    """Convert ``values`` (any shape, a real dtype) to ``target`` by the cast_value rules.

    target : numpy dtype (or name) of a real type.
    rounding : one of ``ROUNDING``.  out_of_range : None (error), ``"clamp"`` or ``"wrap"``
        (integer targets only).
    scalar_map : ``(source scalar, target scalar)`` pairs, first match wins (see module docstring).
    where : a description of the chunk for error messages.
    Returns a new array of ``target`` dtype and the same shape.
    Raises ValueError for a bad option; ``CastError`` (a ValueError) naming the first value
    that cannot be converted, its index, the rule that failed, and ``where``.
    """
    values = np.asarray(values)
    src, tgt = numeric_info(values.dtype), numeric_info(target)
    check_cast_options(rounding, out_of_range, tgt)
    if widens_exactly(values, src, tgt):
        return widen(values, tgt, scalar_map)
    if src.bits <= 16:
        key = tuple((np.array(k).astype(src.dtype).tobytes(), np.array(v).astype(tgt.dtype).tobytes())
                    for k, v in scalar_map)
        lut, lut_status = _lookup_table(src, tgt, rounding, out_of_range, key)
        idx = (values if values.flags.c_contiguous else values.copy()).view(src.code_dtype)
        if src.bits < 8 * src.dtype.itemsize:
            idx = idx & src.code_dtype.type((1 << src.bits) - 1)
        status = lut_status[idx]
        if status.any():
            _raise_first(values, status, src, tgt, rounding, where)
        return lut[idx].reshape(values.shape)
    flat = values.reshape(-1)
    if src.dtype == np.float32 and not tgt.is_int and tgt.bits <= 16:
        table, table_status = _float32_table(tgt, rounding, out_of_range)
        shift = _float32_key_shift(tgt)
        out = np.empty(flat.size, tgt.dtype)
        status = np.empty(flat.size, np.uint8)
        for start in range(0, flat.size, _BLOCK):
            keys = _float32_keys(flat[start : start + _BLOCK], shift)
            out[start : start + keys.size] = table[keys]
            status[start : start + keys.size] = table_status[keys]
        if scalar_map:
            out = _apply_scalar_map(_canonical(flat, src), out, status, src, tgt, scalar_map)
        if status.any():
            _raise_first(values, status, src, tgt, rounding, where)
        return out.reshape(values.shape)
    out = np.empty(flat.size, tgt.dtype)
    first: tuple[np.ndarray, np.ndarray, int] | None = None
    failed = 0
    for start in range(0, flat.size, _BLOCK):  # blocks keep temporaries in cache
        block = flat[start : start + _BLOCK]
        x = _canonical(block, src)
        o, status = _convert(x, src, tgt, rounding, out_of_range)
        if scalar_map:
            o = _apply_scalar_map(x, o, status, src, tgt, scalar_map)
        if status.any():
            failed += int(np.count_nonzero(status))
            first = first or (block, status, start)
        out[start : start + block.size] = o
    if first is not None:
        block, status, start = first
        _raise_first(values, status, src, tgt, rounding, where, offset=start, count=failed)
    return out.reshape(values.shape)
