"""Absolute error bound → an exact integer codec chain (``scale_offset`` + ``cast_value`` to codes).

``design_abs(name, dtype, stats, bound)`` chooses, for one variable whose finite, non-sentinel
values lie in ``[lo, hi]`` (``RangeStats``, a Dask reduction in ``zopt.lossy.analyse``):

- ``scale_offset(offset=o, scale=s)`` with ``o = lo`` and the smallest ``s`` (a value of the
  arithmetic type) for which the round trip provably stays within ``bound`` (below);
- ``cast_value`` to the smallest unsigned integer holding the codes ``0 … q_hi + reserved``,
  ``nearest-even``, no ``out_of_range`` (a value beyond the range is an error, never a clamp);
- ``bits = bit_length(q_hi + reserved)``: the bits the codes need. The codecs storing the codes
  (the tail: pcodec, Lorenzo + pcodec, ``packbits`` keeping ``bits`` bits, …) are chosen by
  ``zopt.lossy.tails``; they are lossless, so the bound does not depend on them.

Arithmetic type: the variable's own type for ``float32``/``float64`` (the spec's rule for
``scale_offset``); integer variables are first cast exactly to ``float64`` by a ``cast_value``
(whose decode rounds back to the integer, nearest-even, with ``out_of_range: clamp``: a decoded
value may pass the type's edge by less than the bound, and clamping only moves it towards the
true value; the encode direction, int → float64, is never out of range).

Special values never widen the range and come back bit for bit:

- NaN, and ±Infinity found in the data, get reserved codes ``q_hi+1, …`` through the integer
  ``cast_value``'s ``scalar_map`` (scale_offset passes them through); so does the scaled value
  of zero when it is not a code already, because zarr 3.4 validates the inner codecs of a shard
  with fill value 0 and ``cast_value`` insists its fill value round-trips (a data value that
  scales to exactly that number decodes to zero's scaled value: within the bound, and checked);
- sentinels — the array's fill value and the CF ``_FillValue`` / ``missing_value`` attributes
  (e.g. ``-1e34``) — are first mapped to ±Infinity by a ``cast_value`` in the variable's own
  type (``float32 → float32``) placed before ``scale_offset``: a sentinel scaled by ``s`` would
  overflow or not decode back exactly, ±Infinity passes ``scale_offset`` unchanged. So at most
  two distinct sentinels, and not together with real infinities of the same sign (ValueError).

The guarantee. With unit roundoff ``u`` of the arithmetic type (2^-24, 2^-53), ``A = hi - o``,
``M = max(|lo|, |hi|)``, ``h = 1/(2s)``, every step rounding to nearest (``x-o``, ``·s``,
``rint``, ``/s``, ``+o``) gives

    |x' - x| <= (1+u)·[h·(1+u) + A·u·(3 + 3u + u²)] + u·M + 4·tiny  (+ u·M for int → float64)

(``tiny``: the smallest subnormal, for underflow). ``s`` is the smallest representable value
whose bound is ``<= bound`` (``< bound + 1/2`` for integers, which round back), computed with
exact rationals (``fractions.Fraction``). Encoding is monotone, so ``[lo, hi]`` maps into
``[0, q_hi]`` with ``q_hi`` the code of ``hi``. The bound is also *checked*, element by element,
on every chunk as it is written (``AbsChain.check``): a chunk that breaks it, or holds a value
outside ``[lo, hi]`` (data appended after the analysis), is an error naming the chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from zopt.errors import OptionError, ZoptError

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["AbsChain", "LossyBoundError", "RangeStats", "design_abs", "exact_abs_error_exceeds"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_UINTS = ((8, "uint8"), (16, "uint16"), (32, "uint32"), (64, "uint64"))


class LossyBoundError(ZoptError, ValueError):
    """A chunk breaks the stated bound or holds values outside the analysed range."""


@dataclass
class RangeStats:
    """What the range reduction found: finite non-sentinel ``lo``/``hi`` (None if there are no
    such values), counts of NaN, +Infinity, -Infinity and of each sentinel."""

    lo: float | int | None = None
    hi: float | int | None = None
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    count: int = 0

    def merge(self, other: RangeStats) -> RangeStats:
        def pick(f, a, b):
            return b if a is None else a if b is None else f(a, b)

        return RangeStats(pick(min, self.lo, other.lo), pick(max, self.hi, other.hi), self.nan + other.nan,
                          self.posinf + other.posinf, self.neginf + other.neginf, self.count + other.count)


def _json_scalar(v: float | np.generic) -> Any:
    """A scalar in Zarr v3 fill-value JSON (NaN/±Infinity as strings)."""
    f = float(v)
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    if isinstance(v, int | np.integer):
        return int(v)
    return f


def _round_up(value: Fraction, dtype: np.dtype) -> np.generic:
    """The smallest ``dtype`` value >= ``value`` (positive); infinity when none is finite."""
    with np.errstate(over="ignore"):
        x = dtype.type(float(value)) if value < Fraction(float(np.finfo(dtype).max)) else dtype.type(np.inf)
    if not np.isfinite(x):
        return x
    while Fraction(float(x)) < value:
        x = np.nextafter(x, dtype.type(np.inf))
    return x


def _round_down(value: Fraction, dtype: np.dtype) -> np.generic:
    x = dtype.type(float(value))
    while Fraction(float(x)) > value:
        x = np.nextafter(x, dtype.type(-np.inf))
    return x


def _frac(v: float | np.generic) -> Fraction:
    return Fraction(int(v)) if isinstance(v, int | np.integer) else Fraction(float(v))


def exact_abs_error_exceeds(a: np.ndarray, b: np.ndarray, bound: float) -> np.ndarray:
    """Elementwise ``|a - b| > bound`` decided exactly (``a``, ``b`` of one real dtype, finite).

    float64 differences round monotonically, so only elements whose rounded difference equals
    ``bound`` are re-checked with exact rationals.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    out = d > bound
    tie = np.flatnonzero(d == bound)
    if tie.size:
        af, bf = a.reshape(-1), b.reshape(-1)
        flat = out.reshape(-1)
        for i in tie:
            flat[i] = abs(_frac(af[i].item()) - _frac(bf[i].item())) > Fraction(bound)
    return out


@dataclass(frozen=True)
class AbsChain:
    """The chain ``design_abs`` chose for one variable (see module docstring).

    source : the variable's numpy dtype name; work : the arithmetic type (``float32``/``float64``).
    lo, hi : the analysed range; offset, scale : ``scale_offset``'s parameters (values of
    ``work``); q_hi : the largest data code; reserved : ``[(value, code)]`` for NaN/±Infinity
    (values as JSON scalars); sentinels : ``[(sentinel, "Infinity" | "-Infinity")]``;
    bits : stored bits per element; storage : the ``cast_value`` target (``uint8`` … ``uint64``).
    """

    name: str
    source: str
    work: str
    bound: float
    lo: Any
    hi: Any
    offset: float
    scale: float
    q_hi: int
    reserved: tuple[tuple[Any, int], ...]
    sentinels: tuple[tuple[Any, str], ...]
    bits: int
    storage: str
    _codecs: dict = field(default_factory=dict, compare=False, repr=False)

    # -- the chain as JSON -------------------------------------------------------------------
    def filters(self) -> list[dict[str, Any]]:
        """The array → array codecs (JSON), in chain order."""
        out = []
        is_int = np.dtype(self.source).kind in "iu"
        if is_int or self.sentinels:
            cfg: dict[str, Any] = {"data_type": self.work, "rounding": "nearest-even"}
            if is_int:  # decoding (float64 → int) may step past the type's edge by < bound: clamp back
                cfg["out_of_range"] = "clamp"  # (encoding int → float64 is never out of range)
            if self.sentinels:
                enc = [[_json_scalar(np.dtype(self.source).type(s)), inf] for s, inf in self.sentinels]
                cfg["scalar_map"] = {"encode": enc, "decode": [[b, a] for a, b in enc]}
            out.append({"name": "cast_value", "configuration": cfg})
        out.append({"name": "scale_offset", "configuration": {"offset": self.offset, "scale": self.scale}})
        cfg = {"data_type": self.storage, "rounding": "nearest-even"}
        if self.reserved:
            enc = [[v, code] for v, code in self.reserved]
            cfg["scalar_map"] = {"encode": enc, "decode": [[code, v] for v, code in self.reserved]}
        out.append({"name": "cast_value", "configuration": cfg})
        return out

    def attributes(self) -> dict[str, Any]:
        """The ``zopt_lossy`` record stored in the variable's attributes (what verify checks)."""
        return {"method": "abs", "abs": self.bound, "range": [_json_scalar(self.lo), _json_scalar(self.hi)],
                "offset": self.offset, "scale": self.scale, "bits": self.bits,
                "sentinels": [_json_scalar(np.dtype(self.source).type(s)) for s, _ in self.sentinels]}

    # -- the round trip, with the codecs the chain names ----------------------------------------
    def _codec_objects(self) -> list[tuple[Any, Any]]:
        """(codec, input ZDType) of each array → array codec (cached per process)."""
        if not self._codecs:
            from zopt.codecs.cast_value import CastValueCodec
            from zopt.codecs.scale_offset import ScaleOffsetCodec
            from zopt.dtypes.numeric import zarr_dtype

            current = zarr_dtype(np.dtype(self.source).name)
            chain = []
            for c in self.filters():
                cls = CastValueCodec if c["name"] == "cast_value" else ScaleOffsetCodec
                codec = cls(**c["configuration"])
                chain.append((codec, current))
                if isinstance(codec, CastValueCodec):
                    current = codec.target
            self._codecs["chain"] = chain
        return self._codecs["chain"]

    def encode(self, x: np.ndarray, where: str | None = None) -> np.ndarray:
        """The stored codes of ``x`` (values of ``source``), through the chain's codecs."""
        return self._through(x, where, decode=False)

    def decode(self, q: np.ndarray, where: str | None = None) -> np.ndarray:
        """Values of ``source`` decoded from codes ``q``."""
        return self._through(q, where, decode=True)

    def _through(self, x: np.ndarray, where: str | None, decode: bool) -> np.ndarray:
        from zopt.codecs.cast_value import CastValueCodec
        from zopt.codecs.scale_offset import scale_offset_decode, scale_offset_encode

        chain = self._codec_objects()
        for codec, spec in reversed(chain) if decode else chain:
            if isinstance(codec, CastValueCodec):
                x = (codec.decode_array if decode else codec.encode_array)(x, spec, where)
            else:
                off, s = codec.parameters(spec)
                x = (scale_offset_decode if decode else scale_offset_encode)(x, off, s, where)
        return x

    def special(self, x: np.ndarray) -> np.ndarray:
        """True where ``x`` is NaN, ±Infinity or a sentinel (restored exactly, not bounded)."""
        out = np.zeros(x.shape, bool)
        if x.dtype.kind == "f":
            out |= ~np.isfinite(x)
        for s, _ in self.sentinels:
            out |= x == x.dtype.type(s)
        return out

    def check(self, x: np.ndarray, where: str) -> None:
        """Raise ``LossyBoundError`` naming ``where`` (the chunk) when a value of ``x`` lies
        outside the analysed range, or its round trip breaks the bound or does not restore a
        NaN, infinity or sentinel exactly. Returns nothing: the codecs then store ``x``."""
        x = np.asarray(x)
        special = self.special(x)
        normal = ~special
        lo, hi = np.dtype(self.source).type(self.lo), np.dtype(self.source).type(self.hi)
        outside = normal & ((x < lo) | (x > hi))
        if outside.any():
            i = np.unravel_index(int(np.argmax(outside)), x.shape)
            raise LossyBoundError(
                f"{where} of {self.name!r}: value {x[i].item()!r} at index {tuple(map(int, i))} is outside the range "
                f"[{self.lo!r}, {self.hi!r}] the abs:{self.bound} chain was designed for ({int(outside.sum())} values); "
                "the data changed since the analysis: run the rewrite again")
        back = self.decode(self.encode(x, where), where)
        bad = np.zeros(x.shape, bool)
        bad[normal] = exact_abs_error_exceeds(x[normal], back[normal], self.bound)
        if x.dtype.kind == "f":
            bad |= np.isnan(x) != np.isnan(back)
            inf = np.isinf(x)
            bad[inf] |= x[inf] != back[inf]
        for s, _ in self.sentinels:
            bad |= (x == x.dtype.type(s)) != (back == back.dtype.type(s))
        if bad.any():
            i = np.unravel_index(int(np.argmax(bad)), x.shape)
            raise LossyBoundError(
                f"{where} of {self.name!r}: value {x[i].item()!r} at index {tuple(map(int, i))} decodes to "
                f"{back[i].item()!r}, breaking abs:{self.bound} or the exact restoration of special values "
                f"({int(bad.sum())} values); this is a zopt bug, please report it")


def _error_bound(h: Fraction, a: Fraction, m: Fraction, u: Fraction, tiny: Fraction, int_source: bool) -> Fraction:
    total = (1 + u) * (h * (1 + u) + a * u * (3 + 3 * u + u * u)) + u * m + 4 * tiny
    return total + u * m if int_source else total


def design_abs(name: str, dtype: npt.DTypeLike, stats: RangeStats, bound: float,
               sentinels: tuple[Any, ...] = ()) -> AbsChain:
    """The ``AbsChain`` of variable ``name`` (numpy ``dtype``) for ``|x' - x| <= bound``.

    stats : the range of its finite, non-sentinel values and which specials occur.
    sentinels : values restored exactly (fill value, ``_FillValue``, ``missing_value``), NaN
        excluded; duplicates are dropped.
    Raises ValueError naming the variable and the parameter: ``abs`` not > 0 or not finite,
    fractional for an integer variable, below what the arithmetic can guarantee over the range,
    a range needing more than 64 bits; ``dtype`` not float32/float64/integer; more than two
    distinct sentinels, or a sentinel with real infinities of the sign it would use.
    """
    dt = np.dtype(dtype)
    where = f"lossy {name}: abs"
    try:
        b = float(bound)
    except (TypeError, ValueError):
        raise OptionError("lossy", label=where, message=f"{bound!r} is not a number") from None
    if not (b > 0) or not math.isfinite(b):
        raise OptionError("lossy", label=where, message=f"the bound must be a finite number > 0, got {bound!r}")
    is_int = dt.kind in "iu"
    if is_int:
        if b != math.floor(b):
            raise OptionError("lossy", label=where, message=f"{name!r} is an integer variable ({dt.name}); the bound must be a whole "
                             f"number, got {bound!r}")
        work: np.dtype = np.dtype(np.float64)
    elif dt in _FLOATS:
        work = dt
    else:
        raise OptionError("lossy", label=f"lossy {name}", message=f"abs bounds support float32, float64 and integer variables, not {dt.name}")
    # sentinels: distinct values, NaN excluded (NaN has its own reserved code)
    uniq: list[Any] = []
    nan_sentinel = False
    for s in sentinels:
        v = dt.type(s).item()
        if isinstance(v, float) and math.isnan(v):
            nan_sentinel = True  # e.g. a NaN fill value: NaN gets its reserved code even if absent
            continue
        if not any(v == w for w in uniq):
            uniq.append(v)
    slots: list[tuple[float, str]] = []
    for s in uniq:
        sign = "-Infinity" if (s < 0 or (s == 0 and math.copysign(1, s) < 0)) else "Infinity"
        if sign in [x for _, x in slots] or (sign == "Infinity" and stats.posinf) or (sign == "-Infinity" and stats.neginf):
            sign = "Infinity" if sign == "-Infinity" else "-Infinity"
        taken = [x for _, x in slots]
        if sign in taken or (sign == "Infinity" and stats.posinf) or (sign == "-Infinity" and stats.neginf):
            raise OptionError("lossy", label=f"lossy {name}", message=f"sentinels (fill value, _FillValue, missing_value) {uniq} are mapped to "
                             "+/-Infinity before scale_offset; at most two distinct sentinels, and only while the data "
                             "has no infinities of the sign each needs")
        slots.append((s, sign))
    lo = stats.lo if stats.lo is not None else 0
    hi = stats.hi if stats.hi is not None else lo
    # offset: lo in the arithmetic type, rounded down (exact for floats and |ints| <= 2^53)
    off = _round_down(_frac(lo), work)
    # A data value must not decode to a sentinel (a reader would see it missing): when a code of
    # the grid decodes exactly to one, the offset moves down one step of the arithmetic type and
    # the chain is designed again (a few times at most; the bound is proved for any offset <= lo).
    problem = _Problem(name, dt, work, is_int, b, bound, stats, lo, hi, tuple(slots), nan_sentinel)
    for _ in range(_OFFSET_TRIES):
        chain = _design_at(problem, off)
        hit = _sentinel_hit(chain)
        if hit is None:
            return chain
        off = np.nextafter(off, work.type(-np.inf))
    raise OptionError("lossy", label=where, message=f"{bound!r} over [{lo!r}, {hi!r}]: the value {hit!r} of the quantisation grid is a "
                     "sentinel (fill value, _FillValue, missing_value), so a data value would read back as missing; "
                     "use another bound or store this variable losslessly")


_OFFSET_TRIES = 8


def _sentinel_hit(chain: AbsChain) -> Any:
    """A sentinel that some data code of ``chain`` decodes to exactly, or None."""
    if not chain.sentinels:
        return None
    work = np.dtype(chain.work)
    for s, _ in chain.sentinels:
        sv = np.dtype(chain.source).type(s)
        if not np.isfinite(sv) or not (_frac(chain.lo) - Fraction(chain.bound) <= _frac(sv) <= _frac(chain.hi) + Fraction(chain.bound)):
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            q = float((work.type(float(sv)) - work.type(chain.offset)) * work.type(chain.scale))
        if not np.isfinite(q):
            continue
        near = np.arange(math.floor(q) - 2, math.ceil(q) + 3)
        near = near[(near >= 0) & (near <= chain.q_hi)].astype(chain.storage)
        if near.size and (chain.decode(near) == sv).any():
            return sv.item()
    return None


def _scaled_zero(work: np.dtype, off: float | np.generic, s: np.generic) -> Any:
    from zopt.codecs.scale_offset import scale_offset_encode

    try:
        with np.errstate(over="ignore"):
            return scale_offset_encode(np.zeros(1, dtype=work), work.type(off), s)[0]
    except ValueError:  # overflows: zarr 3.4 cannot shard this chain anyway
        return None


@dataclass(frozen=True)
class _Problem:
    """What ``design_abs`` designs a chain for, the same over its offset tries: variable ``name``
    of type ``dt`` computed in ``work``, the bound (``b``, as given ``bound``), the range
    (``stats``, ``lo``, ``hi``), the sentinels' ``slots`` and whether NaN is one."""

    name: str
    dt: np.dtype
    work: np.dtype
    is_int: bool
    b: float
    bound: Any
    stats: RangeStats
    lo: Any
    hi: Any
    slots: tuple[tuple[Any, str], ...]
    nan_sentinel: bool


def _design_at(problem: _Problem, off: np.generic) -> AbsChain:
    """The chain for offset ``off`` (a scalar of the arithmetic type, see ``design_abs``)."""
    name, dt, work, is_int, b, bound = problem.name, problem.dt, problem.work, problem.is_int, problem.b, problem.bound
    stats, lo, hi, slots, nan_sentinel = problem.stats, problem.lo, problem.hi, problem.slots, problem.nan_sentinel
    where = f"lossy {name}: abs"
    a, m = _frac(hi) - Fraction(float(off)), max(abs(_frac(lo)), abs(_frac(hi)))
    p = np.finfo(work).nmant + 1
    u, tiny = Fraction(1, 2**p), Fraction(float(np.finfo(work).smallest_subnormal))
    target = Fraction(b) + (Fraction(1, 2) - Fraction(1, 2**20) * (1 + Fraction(b)) if is_int else 0)
    # largest h with _error_bound(h) <= target (the bound is linear in h)
    rest = _error_bound(Fraction(0), a, m, u, tiny, is_int)
    h_max = (target - rest) / ((1 + u) * (1 + u))
    if h_max <= 0:
        raise OptionError("lossy", label=where, message=f"{bound!r} is below what {work.name} arithmetic can guarantee over the range "
                         f"[{lo!r}, {hi!r}] (rounding alone may reach {float(rest):.3g}): it would need more bits "
                         f"than the {p} of {work.name}'s significand; use a larger bound or store this variable "
                         "losslessly")
    s = _round_up(1 / (2 * h_max), work)
    if not np.isfinite(s) or _error_bound(1 / (2 * Fraction(float(s))), a, m, u, tiny, is_int) > target:
        raise OptionError("lossy", label=where, message=f"{bound!r} needs a scale beyond {work.name}'s range over [{lo!r}, {hi!r}]")
    n_special = int(stats.nan > 0 or nan_sentinel) + int(stats.posinf > 0) + int(stats.neginf > 0) + len(slots)
    # upper estimate first: a range needing more than 64 bits is refused before any arithmetic on it
    if a * Fraction(float(s)) + 1 + n_special >= 2**64:
        raise OptionError("lossy", label=where, message=f"{bound!r} over the range [{lo!r}, {hi!r}] needs more than 64 bits per value")
    from zopt.codecs.scale_offset import scale_offset_encode

    with np.errstate(over="ignore"):
        y_hi = scale_offset_encode(np.asarray([float(hi)], dtype=work), work.type(off), s)[0]
    q_hi = int(np.rint(y_hi))
    reserved: list[tuple[str | float, int]] = []
    code = q_hi
    for present, value in ((stats.nan or nan_sentinel, "NaN"), (stats.posinf or "Infinity" in [x for _, x in slots], "Infinity"),
                           (stats.neginf or "-Infinity" in [x for _, x in slots], "-Infinity")):
        if present:
            code += 1
            reserved.append((value, code))
    # zero, scaled, must cast exactly: zarr 3.4 validates a shard's inner codecs with fill value 0
    # whatever the array's fill value is, and cast_value requires its fill value to round-trip.
    # Not when zero is a sentinel: it then reaches scale_offset as ±Infinity, and a data value
    # scaling to exactly that code would decode to the sentinel (read back as missing).
    y0 = None if any(float(v) == 0 for v, _ in slots) else _scaled_zero(work, off, s)
    if y0 is not None and not (y0 == np.rint(y0) and 0 <= y0 <= q_hi):
        code += 1
        reserved.append((float(y0), code))
    if code >= 2**64:
        raise OptionError("lossy", label=where, message=f"{bound!r} over the range [{lo!r}, {hi!r}] needs more than 64 bits per value")
    bits = max(1, code.bit_length())
    storage = next(n for w, n in _UINTS if bits <= w)
    return AbsChain(name=name, source=dt.name, work=work.name, bound=b, lo=lo, hi=hi, offset=float(off),
                    scale=float(s), q_hi=q_hi, reserved=tuple(reserved), sentinels=tuple(slots), bits=bits,
                    storage=storage)
