"""Parsing codec configurations: ``{"name": …, "configuration": {…}}`` with a clear error for
unknown keys, and scalars written in a data type's fill-value JSON encoding."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
from zarr.core.common import parse_named_configuration

from zopt.codecs.exact_cast import cast_array
from zopt.dtypes.numeric import numeric_info
from zopt.errors import OptionError

if TYPE_CHECKING:
    from zarr.core.dtype.wrapper import ZDType

__all__ = ["codec_configuration", "parse_json_scalar"]


def codec_configuration(data: dict[str, Any], name: str, allowed: set[str], *, required: bool = False) -> dict[str, Any]:
    """The configuration object of codec ``name`` (``{}`` when omitted and not ``required``).

    Raises ValueError naming the unknown keys and the allowed ones.
    """
    _, config = parse_named_configuration(data, name, require_configuration=required)
    config = dict(config or {})
    unknown = set(config) - allowed
    if unknown:
        raise OptionError(name, f"unknown configuration keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    return config


def _scalar(a: np.ndarray) -> np.generic:
    """The scalar of a 0-d array."""
    return cast(np.generic, a[()])


def parse_json_scalar(value: object, zdtype: ZDType[Any, Any], parameter: str) -> np.generic:
    """A scalar in ``zdtype``'s fill-value JSON encoding → a numpy scalar of its native dtype.

    parameter : named in errors (e.g. ``"scale_offset offset"``).
    Raises ValueError: a non-integer for an integer type (``1.0`` included), a value out of
    range, a finite number that overflows a float type, or anything zarr's parser refuses.
    """
    native = zdtype.to_native_dtype()
    info = numeric_info(native)
    if info.is_int:
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise OptionError(parameter, f"{info.name} takes a JSON integer, got {value!r}")
        if not info.lo <= int(value) <= info.hi:
            raise OptionError(parameter, f"{value!r} is out of range for {info.name} {info.describe_range()}")
        return _scalar(np.array(int(value)).astype(native))
    if isinstance(value, bool) or not isinstance(value, int | float | str | np.number):
        raise OptionError(parameter, f"{info.name} takes a JSON number, 'NaN', '±Infinity' or a hex string, "
                         f"got {value!r}")
    if isinstance(value, int | float | np.number) and not isinstance(value, str):
        try:
            return _scalar(cast_array(np.array(float(value)), native))
        except ValueError as exc:
            raise OptionError(parameter, f"{value!r} cannot be stored as {info.name}: {exc}") from exc
    try:
        return _scalar(np.asarray(zdtype.from_json_scalar(value, zarr_format=3)).astype(native))
    except (TypeError, ValueError) as exc:
        raise OptionError(parameter, f"{value!r} is not a valid {info.name} value ({exc})") from exc
