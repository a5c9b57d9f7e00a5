"""How a data type's elements split into fixed-width bit components (used by ``packbits``).

A dtype-level description, so that data types (``zopt.dtypes.complex``) can state their own
layout without importing a codec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ComponentLayout"]


@dataclass(frozen=True)
class ComponentLayout:
    """How elements of a data type split into ``N``-bit components.

    bits : N, bits per component; components : 1 or 2 (complex); signed : sign-extend on decode.
    to_uint(values) -> uint array of shape (values.size * components,), each component's N-bit
    pattern (little-endian value). from_uint(u, shape) -> values of ``shape``.
    """

    bits: int
    components: int
    signed: bool
    to_uint: Any
    from_uint: Any
