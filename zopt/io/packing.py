"""CF packing (``scale_factor``/``add_offset``) that differs between files, re-expressed exactly.

``repack(name, files, packs)`` takes each file's packing of one variable and returns None (every
file packed the same way: the integers are kept byte for byte), a ``Repack`` (one exact packing
for all of them), or raises ValueError naming two files. The method: with ``1/b`` the greatest
common divisor of every scale factor and offset difference, taken as the decimals the attributes'
floats stand for (``decimal``: ``0.01``, ``273.15``), file ``i``'s packed ``p`` is
``q = k_i * p + m_i`` (``k_i = s_i * b``, ``m_i = (o_i - O) * b``: integers), stored through
``scale_offset(offset=O, scale=b)`` (``b`` an integer, exact as a float) + ``cast_value`` (the
smallest integer type holding every file's actual ``q``, NaN ↔ its minimum). Refused when ``q``
or ``b`` exceed the float type's mantissa or no 64-bit integer holds ``q``.
Spec: ``/work/shared/specs/scale_offset_cast_value.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["PACKING", "Repack", "decimal", "repack"]

PACKING = ("scale_factor", "add_offset")
_INTS = (np.int8, np.int16, np.int32, np.int64)
#: a file's packing of one variable: (scale decimal, offset decimal, unpacked float type, min, max, fill)
UNPACKED = ("1", "0", "<f4", None, None, None)


@dataclass(frozen=True)
class Repack:
    """One variable's files re-expressed in one packing: per file ``q = k * p + m`` (``per_file``:
    ``(k, m, packed fill or None)``), stored as ``dtype`` floats through scale_offset(``offset``,
    ``scale``) + cast_value(``int_dtype``, NaN ↔ ``nan_code``)."""

    dtype: str  # the unpacked float type
    int_dtype: str
    offset: float
    scale: float  # b, an integer: decode is q / b + offset
    nan_code: int
    per_file: tuple[tuple[int, int, Any], ...]

    def filters(self) -> list[dict[str, Any]]:
        """The two array → array codecs (JSON) before the chain's own."""
        return [
            {"name": "scale_offset", "configuration": {"offset": self.offset, "scale": self.scale}},
            {"name": "cast_value", "configuration": {
                "data_type": self.int_dtype,
                "scalar_map": {"encode": [["NaN", self.nan_code]], "decode": [[self.nan_code, "NaN"]]}}},
        ]

    def decode(self, i: int, packed: np.ndarray) -> np.ndarray:
        """File ``i``'s packed integers as the stored chain decodes them (NaN where the file's fill)."""
        from zopt.codecs.scale_offset import scale_offset_decode

        k, m, fill = self.per_file[i]
        q = packed.astype(np.int64) * k + m
        ft = np.dtype(self.dtype)
        out = scale_offset_decode(q.astype(ft), ft.type(self.offset), ft.type(self.scale))
        if fill is not None:
            out[packed == fill] = np.nan
        return out


def decimal(x: npt.ArrayLike) -> str:
    """The shortest decimal that gives back the attribute's float (``0.01`` for float32 0.01)."""
    first = np.asarray(x).ravel()[0]
    return np.format_float_positional(first, unique=True, trim="-") if first.dtype.kind == "f" else str(int(first))


def _gcd(values: list[Fraction]) -> Fraction:
    den = math.lcm(*(v.denominator for v in values))
    return Fraction(math.gcd(*(int(v * den) for v in values)), den)


def repack(name: str, files: list[str], packs: list[tuple[Any, ...]]) -> Repack | None:
    """None if every file packs ``name`` the same way; else the one exact packing; else ValueError.

    Exact in the attributes' decimal values (``_decimal``): with ``1/b`` the greatest common divisor
    of every scale factor and offset difference, file ``i``'s ``p * s_i + o_i`` is
    ``(k_i * p + m_i) / b + O`` for integers ``k_i = s_i * b``, ``m_i = (o_i - O) * b``; stored as
    ``scale_offset(offset=O, scale=b)`` (an integer: exact as a float) + ``cast_value``."""
    if len({p[:3] for p in packs}) == 1 and len({p[5] for p in packs}) == 1:
        return None
    i0 = next(i for i, p in enumerate(packs) if p[:3] != packs[0][:3] or p[5] != packs[0][5])

    def refuse(why: str) -> ValueError:
        return ValueError(f"src: variable {name!r} is packed differently in {files[0]} (scale_factor={packs[0][0]}, "
                          f"add_offset={packs[0][1]}) and {files[i0]} (scale_factor={packs[i0][0]}, "
                          f"add_offset={packs[i0][1]}), and {why}: repack the files the same way first")

    ftype = np.result_type(*(np.dtype(p[2]) for p in packs))
    origin = Fraction(packs[0][1])
    b = _gcd([Fraction(p[0]) for p in packs] + [abs(Fraction(p[1]) - origin) for p in packs
                                                  if Fraction(p[1]) != origin]).denominator
    per_file, lo, hi = [], 0, 0
    for p in packs:
        k, m = int(Fraction(p[0]) * b), int((Fraction(p[1]) - origin) * b)
        per_file.append((k, m, p[5]))
        if p[3] is not None:
            ends = (k * p[3] + m, k * p[4] + m)
            lo, hi = min(lo, *ends), max(hi, *ends)
    mantissa = 2 ** (np.finfo(ftype).nmant + 1)
    if max(abs(lo), abs(hi), b) >= mantissa:
        raise refuse(f"no single exact packing keeps the values within {ftype}'s {np.finfo(ftype).nmant + 1}-bit "
                     f"mantissa (integers {lo} … {hi} at scale 1/{b})")
    int_dtype = next((t for t in _INTS if np.iinfo(t).min < lo and hi <= np.iinfo(t).max), None)
    if int_dtype is None:
        raise refuse("no 64-bit integer holds the re-expressed values")
    return Repack(ftype.str, np.dtype(int_dtype).name, float(ftype.type(float(origin))), float(b),
                  int(np.iinfo(int_dtype).min), tuple(per_file))
