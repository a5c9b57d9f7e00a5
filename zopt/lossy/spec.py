"""Parsing ``--lossy VAR=METHOD:VALUE`` into ``LossySpec``s (no data read, nothing written).

========================  ==================================================================
``VAR=abs:E``             ``|x' - x| <= E`` (units of the variable) by scale_offset +
                          cast_value (``zopt.lossy.bounds``), then the tail storing the codes
                          in the fewest bytes on sampled chunks (``zopt.lossy.tails``);
                          integers: whole ``E``
``VAR=abs:E:TAIL``        the same with a named tail: ``pcodec``, ``lorenzo`` (or
                          ``lorenzo:AXES``), ``blosc``, ``bytes`` (whole-byte codes + the
                          ``--codecs`` tail) or ``packbits``
``VAR=rel:R[:TAIL]``      ``|x' - x| <= R·|x|`` point-wise, by bitround to the fewest bits that
                          prove it, subnormals kept exactly (``zopt.lossy.relative``); the
                          tail (``pcodec``, ``blosc``, ``bytes``) chosen by trial or named
``VAR=keepbits:K``        bitround to ``K`` mantissa bits (relative error <= 2^-(K+1))
``VAR=info:L``            keepbits holding ``L`` of the real information (0 < L <= 1), one
                          value for the variable (``zopt.lossy.bitinfo``)
``VAR=info:L:chunk``      the same, per inner chunk (a keepbits grid, stored as a plan)
``VAR=plan:PATH``         re-apply the per-chunk keepbits of a saved plan
========================  ==================================================================
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from zopt.errors import OptionError

__all__ = ["METHODS", "ORDER", "REL_ORDER", "TAILS", "LossySpec", "check_tail", "kind", "lorenzo_axes", "parse_lossy"]

METHODS = ("abs", "rel", "keepbits", "info", "plan")
#: tails in the order ``auto`` prefers them on equal size
ORDER = ("pcodec", "lorenzo", "blosc", "bytes", "packbits")
TAILS = ("auto", *ORDER)
#: ``rel``'s tails (the rounded floats themselves): integer-only tails excluded
REL_ORDER = ("pcodec", "blosc", "bytes")


def kind(tail: str) -> str:
    """``tail`` without its axes (``lorenzo:0,1`` → ``lorenzo``)."""
    return tail.partition(":")[0]


def lorenzo_axes(tail: str) -> list[int] | None:
    """The axes of a ``lorenzo:AXES`` tail (None: all). Raises ValueError naming the tail."""
    _, _, axes = tail.partition(":")
    if not axes:
        return None
    from zopt.codecs.lorenzo import parse_axes

    try:
        return list(parse_axes([int(a) for a in axes.split(",")]) or ())  # None only for None
    except ValueError:
        raise ValueError(f"tail {tail!r}: AXES must be increasing dimension indices, e.g. lorenzo:0,2") from None


def check_tail(tail: str, method: str = "abs") -> str:
    """``tail`` if ``method`` (``abs``, ``rel``) takes it: ``TAILS`` or ``lorenzo:AXES`` for
    ``abs``, ``auto`` or ``REL_ORDER`` for ``rel``; else ValueError listing them."""
    if method == "rel":
        if tail in ("auto", *REL_ORDER):
            return tail
        raise ValueError(f"tail {tail!r} is not one of {['auto', *REL_ORDER]}")
    if tail in TAILS or (kind(tail) == "lorenzo" and lorenzo_axes(tail) is not None):
        return tail
    raise ValueError(f"tail {tail!r} is not one of {list(TAILS)} or lorenzo:AXES")


@dataclass(frozen=True)
class LossySpec:
    """One variable's lossy request. value : float (abs, info), int (keepbits) or a path (plan)."""

    variable: str
    method: str
    value: Any
    per_chunk: bool = False
    pack: bool = True  # abs: False for the ``bytes`` tail (kept for callers of the old flag)
    tail: str = "auto"  # abs: ``zopt.lossy.tails.TAILS``

    def text(self) -> str:
        tail = f":{self.tail}" if self.method in ("abs", "rel") and self.tail != "auto" else ""
        return f"{self.method}:{self.value}" + (":chunk" if self.per_chunk else "") + tail


def _parse_one(variable: str, text: str) -> LossySpec:
    method, _, rest = str(text).partition(":")
    where = f"lossy {variable}"
    if method not in METHODS or not rest:
        raise OptionError("lossy", label=where, message=f"{text!r} is not one of abs:BOUND[:TAIL], rel:BOUND[:TAIL], keepbits:BITS, "
                         "info:LEVEL[:chunk], plan:PATH")
    if method == "plan":
        return LossySpec(variable, "plan", rest, per_chunk=True)
    per_chunk = False
    tail = "auto"
    if method == "info" and rest.endswith(":chunk"):
        rest, per_chunk = rest[: -len(":chunk")], True
    if method in ("abs", "rel") and ":" in rest:
        rest, _, tail = rest.partition(":")
        try:
            check_tail(tail, method)
        except ValueError as exc:
            raise OptionError("lossy", label=where, message=f"{method}: {exc}") from None
    try:
        number = float(rest)
    except ValueError:
        raise OptionError("lossy", label=where, message=f"{method}: {rest!r} is not a number") from None
    if method == "abs":
        if not (number > 0) or not math.isfinite(number):
            raise OptionError("lossy", label=where, message=f"abs: the bound must be a finite number > 0, got {rest!r}")
        return LossySpec(variable, "abs", number, pack=tail != "bytes", tail=tail)
    if method == "rel":
        if not 0 < number < 1:  # R >= 1 allows any value within R·|x|: bitround would make powers of two
            raise OptionError("lossy", label=where, message=f"rel: the bound must be in (0, 1) (a relative error, e.g. 0.001), got {rest!r}")
        return LossySpec(variable, "rel", number, tail=tail)
    if method == "keepbits":
        if number != math.floor(number) or not 0 <= number <= 64:
            raise OptionError("lossy", label=where, message=f"keepbits: {rest!r} is not a whole number of mantissa bits in [0, 64] "
                             "(at most 23 for float32, 52 for float64)")
        return LossySpec(variable, "keepbits", int(number))
    if not 0 < number <= 1:
        raise OptionError("lossy", label=where, message=f"info: the information level must be in (0, 1], got {rest!r}")
    return LossySpec(variable, "info", number, per_chunk=per_chunk)


def parse_lossy(items: Mapping[str, Any] | Iterable[str] | str | None) -> dict[str, LossySpec]:
    """``{variable: LossySpec}`` from ``["VAR=abs:0.01", …]``, ``{"VAR": "abs:0.01"}`` or one string.

    Raises ValueError naming the variable and the parameter for a malformed item, a bound that
    is not > 0, keepbits outside [0, 64], an information level outside (0, 1], or a variable
    given twice.
    """
    if items is None:
        return {}
    if isinstance(items, str):
        items = [items]
    pairs: list[tuple[str, Any]] = []
    if isinstance(items, Mapping):
        pairs = [(str(k), v) for k, v in items.items()]  # a LossySpec is kept as parsed
    else:
        for item in items:
            var, sep, text = str(item).partition("=")
            if not sep or not var:
                raise OptionError("lossy", f"{item!r} is not VAR=METHOD:VALUE (e.g. tos=abs:0.01)")
            pairs.append((var, text))
    out: dict[str, LossySpec] = {}
    for var, text in pairs:
        if var in out:
            raise OptionError("lossy", label=f"lossy {var}", message="given twice")
        out[var] = text if isinstance(text, LossySpec) else _parse_one(var, text)
    return out
